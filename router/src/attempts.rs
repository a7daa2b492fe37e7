//! What an answer says of the pods that made it: the input of outlier detection
//! ([`picker::outliers`]).
//!
//! The filter sees one answer per request, after Envoy's retries. The route's
//! served-endpoint header names the pod that gave it: when that is not the pick, the pick's
//! attempt failed (Envoy retries only on 5xx, connection failures, resets and per-try
//! timeouts); the answer's status judges the pod that gave it. Attempts between the first and
//! the last (a third try) are not seen; the pick and the answering pod are enough to find a
//! pod that fails every request. An answer from no known pod (a local reply) with a 5xx
//! status counts against the pick, which was tried first.

use picker::address::PodAddress;

use crate::worker::Worker;

/// Which pod answered, as the served-endpoint header (or `upstream.address`) says.
enum Answerer {
    ThePick,
    Other(PodAddress),
    Unknown,
}

fn answerer(pick: &PodAddress, served: Option<&[u8]>) -> Answerer {
    let Some(text) = served.and_then(|s| std::str::from_utf8(s).ok()).map(str::trim).filter(|s| !s.is_empty()) else {
        return Answerer::Unknown;
    };
    if pick == text {
        return Answerer::ThePick;
    }
    PodAddress::parse(text).map_or(Answerer::Unknown, Answerer::Other)
}

/// Notes the answer to a request sent to `pick`: its `:status` and the pod that gave it.
pub fn note_answer(worker: &Worker, pick: &PodAddress, status: Option<&[u8]>, served: Option<&[u8]>, now_ms: u64) {
    let Ok(mut outliers) = worker.outliers.try_borrow_mut() else { return };
    let failed = status.and_then(|s| s.first()) == Some(&b'5');
    let mut fail = |pod: &PodAddress| {
        worker.stats.increment(worker.stats.pod_attempts_failed);
        if let Some(duration_ms) = outliers.failed(pod, now_ms) {
            worker.stats.ejected(pod);
            log::warn!(
                "wasm-epp: pod {pod} keeps failing requests: out of rotation on this worker for {duration_ms} ms"
            );
        }
    };
    match answerer(pick, served) {
        Answerer::ThePick if failed => fail(pick),
        Answerer::ThePick => outliers.succeeded(pick.as_str(), now_ms),
        Answerer::Other(pod) => {
            fail(pick);
            if failed {
                fail(&pod);
            } else {
                outliers.succeeded(pod.as_str(), now_ms);
            }
        }
        Answerer::Unknown if failed => fail(pick),
        Answerer::Unknown => {}
    }
}
