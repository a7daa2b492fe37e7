//! What an answer says of the pods that made it: the input of outlier detection
//! ([`picker::outliers`]).
//!
//! The filter sees one answer per request, after Envoy's retries. The route's
//! served-endpoint header names the pod that gave it: when that is a later address of the
//! request's destination list, the pick's attempt failed (Envoy retries only on 5xx,
//! connection failures, resets and per-try timeouts, and `override_host` walks the list in
//! order); the answer's status judges the pod that gave it. An address the filter did not
//! name (Envoy's fallback policy chose it, or it is not a pod's own, behind a sidecar) says
//! nothing of the pick. Attempts between the first and the last (a third try) are not seen;
//! the pick and the answering pod are enough to find a pod that fails every request. A 5xx
//! from no known pod (a local reply) counts against the pick, which was tried first. A 5xx
//! from a later pod counts against both: were only pods that fail alone blamed, a pool whose
//! first three choices all fail (the broken pods look idle, so they lead every list) would
//! never learn.

use picker::address::PodAddress;
use wasm_epp_host::Host;

use crate::worker::Worker;

/// Which pod answered, as the served-endpoint header (or `upstream.address`) says.
#[derive(Debug, PartialEq)]
enum Answerer<'a> {
    ThePick,
    /// A later address of the request's list: the attempts before it failed.
    Fallback(&'a str),
    /// No pod, or one the filter did not name (Envoy's fallback policy chose it, or the
    /// address is not a pod's own, e.g. behind a sidecar): nothing is said of the pick
    /// unless the status is a 5xx.
    Unknown,
}

/// Who answered a request whose destination list was `pick`, then `fallbacks`.
fn answerer<'a>(pick: &str, mut fallbacks: impl Iterator<Item = &'a str>, served: Option<&[u8]>) -> Answerer<'a> {
    let Some(served) = served else { return Answerer::Unknown };
    // Nearly every answer: the pick answered, in the canonical form both Envoy and the table
    // write; compared as bytes, with no parse.
    if served == pick.as_bytes() {
        return Answerer::ThePick;
    }
    let Some(served) = std::str::from_utf8(served).ok().and_then(|s| PodAddress::parse(s).ok()) else {
        return Answerer::Unknown;
    };
    if served == *pick {
        return Answerer::ThePick;
    }
    fallbacks.find(|address| served == **address).map_or(Answerer::Unknown, Answerer::Fallback)
}

/// The later address of the destination header's `list` that gave the answer, if one did
/// (Envoy retried past the pick): the request is in flight there from then on.
pub fn fallback_that_answered(list: &str, served: Option<&[u8]>) -> Option<PodAddress> {
    answered_in(list, served).filter(|&(_, pick)| !pick).and_then(|(pod, _)| PodAddress::parse(pod).ok())
}

/// The pod of the destination header's `list` that gave the answer (the pick or a later
/// address), if the served-endpoint header names one.
pub fn pod_that_answered(list: &str, served: Option<&[u8]>) -> Option<PodAddress> {
    answered_in(list, served).and_then(|(pod, _)| PodAddress::parse(pod).ok())
}

/// The address of the destination header's `list` that gave the answer, and whether it is
/// the pick; `None` when the served header names none of them.
fn answered_in<'a>(list: &'a str, served: Option<&[u8]>) -> Option<(&'a str, bool)> {
    let mut addresses = list.split(',').map(str::trim);
    let pick = addresses.next().filter(|p| !p.is_empty())?;
    match answerer(pick, addresses, served) {
        Answerer::ThePick => Some((pick, true)),
        Answerer::Fallback(pod) => Some((pod, false)),
        Answerer::Unknown => None,
    }
}

/// The pod's epoch in the worker's table (0 when it is not there): an ejection ends when it
/// changes (the engine restarted).
fn epoch_of(worker: &Worker, pod: &PodAddress) -> u32 {
    let Ok(cache) = worker.table.try_borrow() else { return 0 };
    cache.table().and_then(|t| t.epoch_of(pod.as_str())).unwrap_or(0)
}

/// Notes the answer to a request whose destination header was `list` (the pick, then its
/// fallbacks): its `:status` and the pod that gave it; `foreign`: a 2xx of a content type no
/// answer of its endpoint has ([`crate::answer_type`]), failed as a 5xx is. With `open` (a body
/// is still to come), a pod's success is not noted now but left to [`settle`] at the answer's
/// end: a pod that answers its headers and then resets every stream would otherwise clear its
/// record with each header and never be ejected. Returns, when a success was left so, the
/// worker's failure count now: the success then clears no failure noted after these headers.
pub fn note_answer(
    worker: &Worker,
    list: &str,
    status: Option<&[u8]>,
    foreign: bool,
    served: Option<&[u8]>,
    now_ms: &dyn Fn() -> u64,
    open: bool,
) -> Option<u64> {
    let mut addresses = list.split(',').map(str::trim);
    let pick = addresses.next().filter(|p| !p.is_empty())?;
    let mut outliers = worker.outliers.try_borrow_mut().ok()?;
    let failed = status.and_then(|s| s.first()) == Some(&b'5') || foreign;
    if foreign {
        worker.stats.increment(worker.stats.answers_foreign);
    }
    let answered_by = answerer(pick, addresses, served);
    let succeeded = !failed && answered_by != Answerer::Unknown;
    if !failed && outliers.is_clear() && answered_by == Answerer::ThePick {
        // A success of the pick while no pod has a record: nothing to note (the common case),
        // but its end may still show a cut stream.
        return open.then(|| outliers.failures_so_far());
    }
    let now_ms = now_ms();
    let mut fail = |pod: &str| {
        let Ok(pod) = PodAddress::parse(pod) else { return };
        worker.stats.increment(worker.stats.pod_attempts_failed);
        if let Some(duration_ms) = outliers.failed(&pod, epoch_of(worker, &pod), now_ms) {
            worker.stats.ejected(&pod);
            log::warn!(
                "wasm-epp: pod {pod} keeps failing requests: out of rotation for {duration_ms} ms (on this worker; the others follow)"
            );
        }
    };
    match answered_by {
        Answerer::ThePick if failed => fail(pick),
        Answerer::ThePick if !open => outliers.succeeded(pick, now_ms),
        Answerer::Fallback(pod) => {
            fail(pick);
            if failed {
                fail(pod);
            } else if !open {
                outliers.succeeded(pod, now_ms);
            }
        }
        Answerer::Unknown if failed => fail(pick),
        Answerer::ThePick | Answerer::Unknown => {}
    }
    (succeeded && open).then(|| outliers.failures_so_far())
}

/// Envoy's response flags (`response.flags`, its legacy bit set) of an upstream that cut the
/// answer: a remote reset (UR), a connection terminated (UC), a protocol error (UPE).
const UPSTREAM_CUT: u64 = 0x10 | 0x40 | 0x80_0000;
/// The route's stream idle timeout ended it (SI): nothing moved for that long mid-answer.
const STREAM_IDLE: u64 = 0x1_0000;
/// The route's `timeout` ended it (UT, `UpstreamRequestTimeout`, bit 2 of Envoy's legacy set):
/// the whole answer took longer than the route allows. As shipped (600 s, under the route's
/// idle timeout of `timeout + request_timeout`), this, not SI, ends a hung pod's stream.
const UPSTREAM_TIMEOUT: u64 = 0x4;

/// Silence before a UT end from which the pod, not the answer's length, ran the route's
/// timeout out. vLLM sends a stream's events once per decode step (tens of ms); its longest
/// pauses mid-answer (a preempted sequence waiting to be run again, a grammar compiled for
/// structured output) last seconds. A minute is far beyond those, far below the shipped
/// 600 s, and far above the worker clock's lag (one tick: 20 ms by default, 10 s at most). A
/// stream that waited that long for its first event after its headers counts too: a pod that
/// starts no output for a minute failed the request as surely as a hung one.
pub const SILENT_BEFORE_TIMEOUT_MS: u64 = 60_000;
/// The client cut it: its connection terminated (DC) or it reset the stream (DR).
const DOWNSTREAM_CUT: u64 = 0x4000 | 0x1000_0000;

/// Answer bytes below which a client that stops reading cannot be what stalled the pod: Envoy
/// reads on from the pod until it holds the listener's `per_connection_buffer_limit_bytes`
/// unsent to the client (1 MiB by default, 16 MiB as shipped), on top of what the sockets and
/// the client's window take. Past it, an idle timeout may be the client's doing.
const CLIENT_CANNOT_STALL_BELOW: u64 = 1 << 20;

/// Who left an answer unfinished (one that did not end whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfinished {
    /// The pod: it reset the stream or its connection, broke the protocol, or went silent
    /// until the stream idle timeout (or for [`SILENT_BEFORE_TIMEOUT_MS`] before the route's
    /// timeout) before the answer could have filled Envoy's buffer toward a client that
    /// stopped reading (a hung engine).
    ByThePod,
    /// Not to be told: the idle timeout (or the route's timeout after a silence) ended an
    /// answer long enough that a client that stopped reading may have stalled it as much as a
    /// hung pod. Neither a failure nor a success.
    Unclear,
    /// The client (it left or reset), the route's timeout ending an answer that was still
    /// moving (a long answer, not a hung pod), or nothing Envoy names.
    NotByThePod,
}

impl Unfinished {
    /// What the answer's end says of its pod; `failed_in_stream`: it opened with a server's
    /// error event ([`crate::stream_error`]), a failure however it ended.
    pub fn end(self, failed_in_stream: bool) -> AnswerEnd {
        match self {
            _ if failed_in_stream => AnswerEnd::Failed(AnswerFailure::ErrorEvent),
            Self::ByThePod => AnswerEnd::Failed(AnswerFailure::Cut),
            Self::Unclear => AnswerEnd::Unclear,
            Self::NotByThePod => AnswerEnd::Succeeded,
        }
    }
}

/// What of an unfinished answer had passed when it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerPassed {
    /// Its body bytes.
    pub bytes: u64,
    /// How long nothing of it had moved (since its headers or its last body chunk).
    pub silent_ms: u64,
}

/// Who left an answer unfinished, from Envoy's response flags and what of the answer passed.
/// Read only for an answer that did not end whole (one host call on that rare path).
pub fn unfinished_by(host: &dyn Host, passed: AnswerPassed) -> Unfinished {
    let flags = host.property(&["response", "flags"]).ok().flatten();
    let flags = flags.and_then(|bytes| <[u8; 8]>::try_from(bytes.as_slice()).ok()).map(u64::from_le_bytes);
    // A silence that ran into the route's timeout is judged as one the idle timeout ended.
    let stalled = |bytes| if bytes < CLIENT_CANNOT_STALL_BELOW { Unfinished::ByThePod } else { Unfinished::Unclear };
    match flags {
        Some(flags) if flags & DOWNSTREAM_CUT != 0 => Unfinished::NotByThePod,
        Some(flags) if flags & UPSTREAM_CUT != 0 => Unfinished::ByThePod,
        Some(flags) if flags & STREAM_IDLE != 0 => stalled(passed.bytes),
        Some(flags) if flags & UPSTREAM_TIMEOUT != 0 && passed.silent_ms >= SILENT_BEFORE_TIMEOUT_MS => {
            stalled(passed.bytes)
        }
        _ => Unfinished::NotByThePod,
    }
}

/// How an answer that began as a success failed after its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerFailure {
    /// The pod cut it (reset mid-answer), or went silent until the stream idle timeout (or
    /// long before the route's timeout).
    Cut,
    /// A stream that opened with a server's error event ([`crate::stream_error`]).
    ErrorEvent,
}

/// What the end of an answer that began as a success says of its pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerEnd {
    Succeeded,
    Failed(AnswerFailure),
    /// Nothing: see [`Unfinished::Unclear`].
    Unclear,
}

/// The end of an answer whose success [`note_answer`] left open (with the failure count it
/// returned), from `pod`.
pub fn settle(worker: &Worker, pod: &PodAddress, failures_then: u64, end: AnswerEnd, now_ms: u64) {
    let Ok(mut outliers) = worker.outliers.try_borrow_mut() else { return };
    let failure = match end {
        AnswerEnd::Failed(failure) => failure,
        AnswerEnd::Unclear => return,
        AnswerEnd::Succeeded => return outliers.succeeded_unless_failed_since(pod.as_str(), failures_then, now_ms),
    };
    worker.stats.increment(worker.stats.pod_attempts_failed);
    let (counter, what) = match failure {
        AnswerFailure::Cut => (worker.stats.answers_cut, "cutting its answers"),
        AnswerFailure::ErrorEvent => (worker.stats.streams_failed, "failing its streams"),
    };
    worker.stats.increment(counter);
    if let Some(duration_ms) = outliers.failed(pod, epoch_of(worker, pod), now_ms) {
        worker.stats.ejected(pod);
        log::warn!(
            "wasm-epp: pod {pod} keeps {what}: out of rotation for {duration_ms} ms (on this worker; the others follow)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`answerer`] of a destination header's value, split as [`note_answer`] splits it.
    fn answerer<'a>(list: &'a str, served: Option<&[u8]>) -> Answerer<'a> {
        let mut addresses = list.split(',').map(str::trim);
        let pick = addresses.next().unwrap_or_default();
        super::answerer(pick, addresses, served)
    }

    #[test]
    fn the_answering_pod_is_found_in_the_list_by_address_not_by_text() {
        let list = "10.0.0.1:8000,10.0.0.2:8000,[::1]:8003";
        assert_eq!(answerer(list, Some(b"10.0.0.1:8000")), Answerer::ThePick);
        assert_eq!(answerer(list, Some(b" 10.0.0.2:8000")), Answerer::Fallback("10.0.0.2:8000"));
        assert_eq!(answerer(list, Some(b"[0:0::1]:8003")), Answerer::Fallback("[::1]:8003"));
        assert_eq!(answerer(list, Some(b"10.0.0.9:8000")), Answerer::Unknown, "chosen by Envoy, not named");
        assert_eq!(answerer(list, Some(b"10.0.0.1:15001")), Answerer::Unknown, "a sidecar's port");
        assert_eq!(answerer(list, Some(b"-")), Answerer::Unknown);
        assert_eq!(answerer(list, None), Answerer::Unknown);
    }
}
