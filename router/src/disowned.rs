//! Pods that list a model or adapter they do not serve: a stale `/v1/models`, a broken
//! exporter, a lying pod. The table's listings are trusted for routing
//! ([`picker::models::index`]); a pod that answers a request for a name it lists with the
//! engine's own "model does not exist" 404 says otherwise, and its answer is the truer one.
//! Each worker keeps the (pod, name) pairs it saw so disowned, for a while, and routes that
//! name's requests to the other pods listing it ([`picker::route::ModelQuery::disowned`]).
//!
//! A 404 is not a failure for outlier detection: the pod is sound for its other names, and
//! a client asking for a name no pod serves gets every pod's 404. Nor is it retried by
//! Envoy: the shipped `retry_on` is `5xx,reset,connect-failure`, so the client of the request
//! that found the lie gets the pod's 404. Adding `retriable_status_codes: [404]` would save
//! that one answer but retry every genuinely unknown model across the pool's list (the
//! filter answers a name no pod lists itself, but a name a silent or cut pod may serve is
//! sent on), multiplying a client's mistake by the list's length; it is not done.

use picker::address::PodAddress;

use crate::worker::Worker;

/// How long a pod's 404 to a name it lists keeps that name's requests away from it, unless
/// its engine restarts first (a new epoch: it may have loaded the name). A listing is scraped
/// every few hundred ms, but a lying one is scraped as often and lies again; runtime LoRA
/// loading may make the name true at any time without a new epoch. A minute costs a pod that
/// became honest a minute of that name's traffic, and a pod that keeps lying one 404 per
/// minute per worker per name.
pub const DISOWNED_FOR_MS: u64 = 60_000;

/// Pairs a worker keeps. A pool with a few broken pods disowning a few names each fits many
/// times over; a pod disowning hundreds of names (a listing wrong throughout) crowds out only
/// this worker's memory of them (the soonest to end go first), never memory: 64 entries of
/// an address and a name (each bounded by the listings' names) are a few KB.
pub const MAX_DISOWNED: usize = 64;

/// Bytes of a 404's body read for the engine's error type: vLLM's answer (`{"error":
/// {"message":"The model `x` does not exist.","type":"NotFoundError",…}}`, older releases
/// without the `error` wrapper) names it within its first 100 bytes after the model's name.
/// A name is at most a few hundred bytes; 1 KiB holds both.
pub const NOT_FOUND_BYTES: usize = 1024;

/// vLLM's error type for a model it does not serve (`OpenAIServing._check_model`); other
/// 404s (FastAPI's `{"detail":"Not Found"}` for a path an older engine lacks) say nothing of
/// the model.
const NOT_FOUND_TYPE: &[u8] = b"\"NotFoundError\"";

/// Whether a 404's body (its first [`NOT_FOUND_BYTES`]) is the engine's "model does not
/// exist".
pub fn says_model_not_found(body: &[u8]) -> bool {
    body.windows(NOT_FOUND_TYPE.len()).any(|window| window == NOT_FOUND_TYPE)
}

/// One pod's disowning of one name.
#[derive(Debug)]
struct Entry {
    pod: PodAddress,
    model: Box<str>,
    /// The pod's epoch then: a restarted engine is trusted again.
    epoch: u32,
    until_ms: u64,
}

/// The (pod, name) pairs this worker saw disowned, at most [`MAX_DISOWNED`].
#[derive(Debug, Default)]
pub struct Disowned {
    entries: Vec<Entry>,
}

impl Disowned {
    /// Nothing disowned: the decision's only cost then (one length check).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `pod` (of `epoch`) answered a request for `model`, which it lists, that it does not
    /// serve. Returns whether the pod had no other name disowned (to warn once per pod).
    pub fn note(&mut self, pod: &PodAddress, model: &str, epoch: u32, now_ms: u64) -> bool {
        self.forget_ended(now_ms);
        let until_ms = now_ms.saturating_add(DISOWNED_FOR_MS);
        if let Some(entry) = self.entries.iter_mut().find(|e| e.pod == *pod && &*e.model == model) {
            (entry.epoch, entry.until_ms) = (epoch, until_ms);
            return false;
        }
        let first_of_pod = !self.entries.iter().any(|e| e.pod == *pod);
        if self.entries.len() >= MAX_DISOWNED {
            let soonest = self.entries.iter().enumerate().min_by_key(|(_, e)| e.until_ms).map(|(i, _)| i);
            if let Some(i) = soonest {
                self.entries.swap_remove(i);
            }
        }
        self.entries.push(Entry { pod: pod.clone(), model: model.into(), epoch, until_ms });
        first_of_pod
    }

    /// The pods that disowned `model` and still do: their time is not up, and their epoch
    /// (`epoch_of`, `None` for a pod no longer in the table) is the one they answered in.
    pub fn pods_for(&mut self, model: &str, now_ms: u64, epoch_of: &dyn Fn(&str) -> Option<u32>) -> Vec<PodAddress> {
        self.forget_ended(now_ms);
        let current = |e: &Entry| epoch_of(e.pod.as_str()).is_some_and(|epoch| epoch == e.epoch);
        self.entries.retain(|e| &*e.model != model || current(e));
        self.entries.iter().filter(|e| &*e.model == model).map(|e| e.pod.clone()).collect()
    }

    fn forget_ended(&mut self, now_ms: u64) {
        self.entries.retain(|e| e.until_ms > now_ms);
    }
}

/// `pod` answered a request for `model` with the engine's "model does not exist": kept from
/// that name for a while if its table entry lists it (a name it does not list, it never
/// claimed; a pod gone from the table is not routed to anyway). Warns once per pod, not per
/// name or request: a listing wrong throughout would flood the log.
pub fn note(worker: &Worker, pod: &PodAddress, model: &str, now_ms: u64) {
    let Ok(cache) = worker.table.try_borrow() else { return };
    let Some(table) = cache.table() else { return };
    let Some((position, entry)) = table.pods.iter().enumerate().find(|(_, p)| p.address == *pod) else { return };
    if !u32::try_from(position).is_ok_and(|position| cache.models().lists(model, position)) {
        return;
    }
    let Ok(mut disowned) = worker.disowned.try_borrow_mut() else { return };
    worker.stats.increment(worker.stats.models_disowned);
    if disowned.note(pod, model, entry.epoch, now_ms) {
        log::warn!(
            "wasm-epp: pod {pod} lists model {model:?} but answers that it does not exist: its requests go to the other pods listing it for {DISOWNED_FOR_MS} ms (on this worker; its other names alike, unlogged)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(i: u8) -> PodAddress {
        PodAddress::parse(&format!("10.0.0.{i}:8000")).unwrap_or_else(|_| unreachable!())
    }

    #[test]
    fn a_pair_lasts_its_time_or_until_its_pod_restarts() {
        let mut disowned = Disowned::default();
        assert!(disowned.note(&pod(1), "x", 3, 0), "the pod's first");
        assert!(!disowned.note(&pod(1), "y", 3, 0), "its second name: warned already");
        let epoch_3 = |_: &str| Some(3);
        assert_eq!(disowned.pods_for("x", DISOWNED_FOR_MS - 1, &epoch_3), [pod(1)]);
        assert_eq!(disowned.pods_for("z", 0, &epoch_3), [] as [PodAddress; 0], "its other names are not in question");
        assert_eq!(disowned.pods_for("x", DISOWNED_FOR_MS, &epoch_3), [] as [PodAddress; 0], "its time is up");
        assert!(disowned.is_empty());
        disowned.note(&pod(1), "x", 3, 0);
        assert_eq!(disowned.pods_for("x", 1, &|_| Some(4)), [] as [PodAddress; 0], "a new engine");
        disowned.note(&pod(1), "x", 3, 0);
        assert_eq!(disowned.pods_for("x", 1, &|_| None), [] as [PodAddress; 0], "gone from the table");
    }

    #[test]
    fn the_set_is_bounded_and_gives_up_the_soonest_to_end() {
        let mut disowned = Disowned::default();
        for i in 0..(MAX_DISOWNED as u64 + 10) {
            disowned.note(&pod(1), &format!("a{i}"), 1, i);
        }
        assert_eq!(disowned.entries.len(), MAX_DISOWNED);
        let now = MAX_DISOWNED as u64 + 10;
        assert_eq!(disowned.pods_for("a0", now, &|_| Some(1)), [] as [PodAddress; 0], "the oldest went");
        assert_eq!(disowned.pods_for(&format!("a{}", now - 1), now, &|_| Some(1)), [pod(1)]);
    }

    #[test]
    fn only_the_engines_own_not_found_disowns() {
        let vllm =
            br#"{"error":{"message":"The model `x` does not exist.","type":"NotFoundError","param":null,"code":404}}"#;
        let older = br#"{"object":"error","message":"The model `x` does not exist.","type":"NotFoundError","param":null,"code":404}"#;
        assert!(says_model_not_found(vllm));
        assert!(says_model_not_found(older));
        assert!(!says_model_not_found(br#"{"detail":"Not Found"}"#), "a path the pod lacks");
        assert!(!says_model_not_found(b""));
    }
}
