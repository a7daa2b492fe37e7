//! Prefill/decode disaggregation as llm-d runs it: a pod has a role, and a decode pod that
//! receives `x-prefiller-host-port` behaves like llm-d's routing sidecar in front of vLLM
//! (see `sidecar`): the prefill pod computes the prompt's KV, the blocks travel to the decode
//! pod, which then only decodes.

pub mod metrics;
pub mod sidecar;

/// The header the endpoint picker writes with the prefill pod's `host:port` (llm-d's name).
pub const PREFILLER_HEADER: &str = "x-prefiller-host-port";

/// What a pod is for in a disaggregated pool (llm-d's `llm-d.ai/role` label values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PodRole {
    /// Computes prompts' KV for decode pods; never acts on `x-prefiller-host-port`.
    Prefill,
    /// Decodes; prefills remotely when the picker names a prefill pod.
    Decode,
    /// Both (an ordinary pod); also acts on the header, as a decode pod would.
    #[default]
    Both,
}

impl PodRole {
    /// Lower-case name, as on the command line and in the `role` metric label.
    pub fn name(self) -> &'static str {
        match self {
            PodRole::Prefill => "prefill",
            PodRole::Decode => "decode",
            PodRole::Both => "both",
        }
    }

    /// Whether a request naming a prefill pod is prefilled there (the sidecar runs).
    pub fn takes_remote_prefill(self) -> bool {
        self != PodRole::Prefill
    }
}

/// What the sidecar did, for `/metrics` and `/sim/stats` (reset on `/sim/restart`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PdCounters {
    /// Requests whose prompt a prefill pod computed.
    pub remote_prefills: u64,
    /// Requests that named a prefill pod which failed (or was not `ip:port`): prefilled here.
    pub prefill_fallbacks: u64,
    /// Prompt tokens whose KV was transferred in (blocks not already cached here).
    pub transferred_tokens: u64,
    /// Wall time from asking the prefill pod to its answer, summed over remote prefills, µs
    /// (its queue, its prefill, its API overhead and the hop): where a split TTFT goes.
    pub prefill_wait_us: u64,
    /// Wall time of the KV transfers, summed over remote prefills, µs.
    pub transfer_us: u64,
}
