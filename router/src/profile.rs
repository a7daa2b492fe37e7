//! Where the request path's time goes inside Envoy, phase by phase: built only with the
//! `profile` feature (`make bench-cost` builds a separate module with it), so the shipped
//! filter carries none of it.
//!
//! Native benchmarks time the code but not V8 running it nor the host calls; this times the
//! phases where they run, with the host's clock. [`span`] starts a phase; ending (or
//! dropping) the span adds its nanoseconds to a per-VM total that [`flush`] hands to Envoy on the tick as the
//! counters `wasm_epp.profile.<phase>_ns` and `wasm_epp.profile.<phase>_calls`. Without the
//! feature, a span is an empty value and both functions compile to nothing.

#[cfg(feature = "profile")]
pub use enabled::{flush, span, Span};

#[cfg(not(feature = "profile"))]
pub use disabled::{flush, span, Span};

/// The phases of one request and of the tick. Nested phases (the decision's steps) are
/// also counted inside their parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `on_request_headers`, whole.
    Headers,
    /// `on_request_body` of the last chunk, whole (read, parse, decide, set the header).
    Body,
    /// Copying the body into the VM.
    BodyRead,
    /// Parsing the JSON body.
    Parse,
    /// The router's decision, whole.
    Decide,
    /// Hashing the prompt into prefix blocks.
    Hash,
    /// Reading the other workers' in-flight counts.
    InflightRead,
    /// Filter, score and pick.
    Choose,
    /// Recording the pick in the prefix replica.
    Record,
    /// Publishing this worker's in-flight counts.
    InflightPublish,
    /// `on_response_headers`, whole.
    ResponseHeaders,
    /// Reporting the answering pod in a response header.
    ServedEndpoint,
    /// Learning's check of the pod that answered (a response header).
    ObserveHeaders,
    /// Reading the answer's `:status` (outlier detection, the comparison).
    AnswerStatus,
    /// Outlier detection's judgement of the answer.
    JudgeAnswer,
    /// `on_response_body`, whole (every chunk).
    ResponseBody,
    /// Learning at the first body byte (the prompt's tokens released, a TTFT sample).
    ObserveFirstByte,
    /// Learning's copy of each chunk and its scan for `usage`.
    ObserveScan,
    /// `on_log`, whole.
    Log,
    /// Learning from the answer's `usage` at its end.
    ObserveEnd,
    /// The worker's tick, whole.
    Tick,
    /// The tick's pod-table refresh.
    TickTable,
    /// The tick's in-flight publish and read.
    TickInflight,
    /// The tick's send of this worker's decisions to the pool service.
    TickSend,
    /// The tick's read of everyone's decisions from the ring.
    TickRing,
    /// The tick's stats flush.
    TickStats,
}

impl Phase {
    /// Every phase, in report order.
    pub const ALL: [Phase; 26] = [
        Phase::Headers,
        Phase::Body,
        Phase::BodyRead,
        Phase::Parse,
        Phase::Decide,
        Phase::Hash,
        Phase::InflightRead,
        Phase::Choose,
        Phase::Record,
        Phase::InflightPublish,
        Phase::ResponseHeaders,
        Phase::ServedEndpoint,
        Phase::ObserveHeaders,
        Phase::AnswerStatus,
        Phase::JudgeAnswer,
        Phase::ResponseBody,
        Phase::ObserveFirstByte,
        Phase::ObserveScan,
        Phase::Log,
        Phase::ObserveEnd,
        Phase::Tick,
        Phase::TickTable,
        Phase::TickInflight,
        Phase::TickSend,
        Phase::TickRing,
        Phase::TickStats,
    ];

    /// The name in the counters' names.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Headers => "headers",
            Phase::Body => "body",
            Phase::BodyRead => "body_read",
            Phase::Parse => "parse",
            Phase::Decide => "decide",
            Phase::Hash => "hash",
            Phase::InflightRead => "inflight_read",
            Phase::Choose => "choose",
            Phase::Record => "record",
            Phase::InflightPublish => "inflight_publish",
            Phase::ResponseHeaders => "response_headers",
            Phase::ResponseBody => "response_body",
            Phase::ObserveHeaders => "observe_headers",
            Phase::AnswerStatus => "answer_status",
            Phase::JudgeAnswer => "judge_answer",
            Phase::ObserveFirstByte => "observe_first_byte",
            Phase::ObserveScan => "observe_scan",
            Phase::Log => "log",
            Phase::ObserveEnd => "observe_end",
            Phase::Tick => "tick",
            Phase::ServedEndpoint => "served_endpoint",
            Phase::TickTable => "tick_table",
            Phase::TickInflight => "tick_inflight",
            Phase::TickSend => "tick_send",
            Phase::TickRing => "tick_ring",
            Phase::TickStats => "tick_stats",
        }
    }
}

#[cfg(feature = "profile")]
mod enabled {
    use std::cell::RefCell;

    use wasm_epp_host::{Host, HostResult, MetricKind};

    use super::Phase;

    /// Per phase: (nanoseconds, calls) not yet flushed, and the two counters' ids once
    /// defined.
    #[derive(Default)]
    struct Totals {
        pending: [(u64, u64); Phase::ALL.len()],
        counters: Option<Vec<(u32, u32)>>,
    }

    thread_local! {
        static TOTALS: RefCell<Totals> = RefCell::new(Totals::default());
    }

    /// A running phase; its time is added when it is dropped.
    pub struct Span<'h> {
        host: &'h dyn Host,
        phase: Phase,
        started_ns: u64,
    }

    pub fn span(host: &dyn Host, phase: Phase) -> Span<'_> {
        Span { host, phase, started_ns: host.now_ns() }
    }

    impl Span<'_> {
        /// Ends the phase here (as dropping it does).
        pub fn end(self) {}
    }

    impl Drop for Span<'_> {
        fn drop(&mut self) {
            let elapsed = self.host.now_ns().saturating_sub(self.started_ns);
            let index = self.phase as usize;
            TOTALS.with(|totals| {
                if let Ok(mut totals) = totals.try_borrow_mut() {
                    if let Some((ns, calls)) = totals.pending.get_mut(index) {
                        *ns = ns.saturating_add(elapsed);
                        *calls = calls.saturating_add(1);
                    }
                }
            });
        }
    }

    /// Hands the totals since the last flush to Envoy's counters.
    pub fn flush(host: &dyn Host) {
        TOTALS.with(|totals| {
            let Ok(mut totals) = totals.try_borrow_mut() else { return };
            if totals.counters.is_none() {
                let define = |suffix: &str, phase: Phase| {
                    host.define_metric(MetricKind::Counter, &format!("wasm_epp.profile.{}_{suffix}", phase.name()))
                };
                let ids: HostResult<Vec<(u32, u32)>> =
                    Phase::ALL.iter().map(|&p| Ok((define("ns", p)?, define("calls", p)?))).collect();
                totals.counters = ids.ok();
            }
            let Some(counters) = totals.counters.clone() else { return };
            for ((ns_id, calls_id), (ns, calls)) in counters.iter().zip(totals.pending.iter_mut()) {
                if *calls > 0 {
                    let _ = host.increment_metric(*ns_id, *ns);
                    let _ = host.increment_metric(*calls_id, *calls);
                    (*ns, *calls) = (0, 0);
                }
            }
        });
    }
}

#[cfg(not(feature = "profile"))]
mod disabled {
    use wasm_epp_host::Host;

    use super::Phase;

    /// Nothing: the shipped build does not time its phases.
    pub struct Span;

    impl Span {
        #[inline(always)]
        pub fn end(self) {}
    }

    #[inline(always)]
    pub fn span(_host: &dyn Host, _phase: Phase) -> Span {
        Span
    }

    #[inline(always)]
    pub fn flush(_host: &dyn Host) {}
}

#[cfg(all(test, feature = "profile"))]
mod tests {
    use super::*;
    use wasm_epp_host::MockHost;

    #[test]
    fn spans_add_up_per_phase_and_reach_the_counters_on_flush() {
        let host = MockHost::new();
        host.clock_ms.set(1_000);
        for _ in 0..3 {
            let _span = span(&host, Phase::Parse);
            host.advance(2);
        }
        flush(&host);
        let metric = |name: &str| host.metric(name);
        assert_eq!(metric("wasm_epp.profile.parse_calls"), 3);
        assert_eq!(metric("wasm_epp.profile.parse_ns"), 6_000_000);
        assert_eq!(metric("wasm_epp.profile.choose_calls"), 0);
    }
}
