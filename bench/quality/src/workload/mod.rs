//! The workloads, each a pool shape plus a fixed list of jobs built from one seed.
//!
//! A workload is data, not behaviour: every target replays exactly the same jobs on a pool of
//! the same shape, so differences in the results come from the routing alone. Pod flags that
//! shape the pressure (KV blocks, running-sequence limit) live with the workload that needs
//! them, with the reason for each number beside it.

mod agents;
mod burst;
mod heterogeneous;
mod ladder;
mod llm_d_ladder;
mod mixed_lengths;
mod multi_turn;
mod no_prefix;
mod shared_chat;
mod shared_prefix;

/// Which workload; the short names are the `--workloads` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum WorkloadName {
    /// 2 pods, 5 shared 512-token prefixes, 100 prompts, 8 concurrent.
    #[value(name = "a", alias = "shared-prefix")]
    SharedPrefix,
    /// 8 pods, 64 Zipf-popular system prompts, multi-turn chats, 16 concurrent, KV pressure.
    #[value(name = "b", alias = "multi-turn")]
    MultiTurn,
    /// 4 pods, unrelated random prompts, 16 concurrent: pure load balancing.
    #[value(name = "c", alias = "no-prefix")]
    NoPrefix,
    /// 4 pods, every request released at once: more work than the pool can drain.
    #[value(name = "d", alias = "burst")]
    Burst,
    /// 4 pods, 16 shared 1,000-token system prompts, 400 streaming chats, 16 concurrent, KV
    /// pressure (the replicas dimension's workload, issue 12).
    #[value(name = "e", alias = "shared-chat")]
    SharedChat,
    /// 4 pods each holding 4 of 8 LoRA adapters (max_loras 2), Zipf-popular adapters plus
    /// base-model traffic (issue 15; see `crate::models`).
    #[value(name = "h", alias = "adapters")]
    Adapters,
    /// 4 pods, two base models (3 pods `alpha`, 1 pod `beta`), 70/30 traffic (issue 15).
    #[value(name = "i", alias = "two-models")]
    TwoModels,
    /// 4 pods, two 3× slower at prefill; unrelated 1k–3k-token prompts, 12 concurrent (issue 14).
    #[value(name = "f", alias = "heterogeneous")]
    Heterogeneous,
    /// 4 pods, short chats and one 8k-token document in twenty, 16 concurrent (issue 14).
    #[value(name = "l", alias = "mixed-lengths")]
    MixedLengths,
    /// 4 pods, 48 shared 6k-token system prompts, 1.2k-token questions, open-loop Poisson
    /// ladder from ¼ to 2.5 × round robin's capacity (llm-d's optimized-baseline shape, scaled; issue 14).
    #[value(name = "g", alias = "ladder")]
    Ladder,
    /// Workload g's pool and prompts on llm-d's own ladder: its 17 stages and their durations
    /// (about 500 s, some 350 s of them past round robin's capacity), rates scaled so the top
    /// is g's (issue 14).
    #[value(name = "o", alias = "ladder-llm-d")]
    LadderLlmD,
    /// 4 pods, 48 agent sessions on the Responses API (8 kinds of 4k-token instructions), 8
    /// turns each resending the conversation with tool calls and outputs, 16 at once.
    #[value(name = "m", alias = "agents")]
    Agents,
    /// Workload m's sessions on the Anthropic Messages API (`/v1/messages`, as Claude Code
    /// calls vLLM): `system`, `tool_use` and `tool_result` blocks, a `cache_control` marker on
    /// the newest block, moved each turn.
    #[value(name = "n", alias = "messages-agents")]
    MessagesAgents,
}

impl WorkloadName {
    /// The least time a request of this workload is given before it counts as an error, if
    /// the workload needs more than the command line's `--request-timeout-s` may say.
    pub fn request_timeout_floor(self) -> Option<std::time::Duration> {
        match self {
            WorkloadName::LadderLlmD => Some(std::time::Duration::from_secs(llm_d_ladder::REQUEST_TIMEOUT_FLOOR_S)),
            _ => None,
        }
    }

    /// The name used in results.
    pub fn label(self) -> &'static str {
        match self {
            WorkloadName::SharedPrefix => "a-shared-prefix",
            WorkloadName::MultiTurn => "b-multi-turn",
            WorkloadName::NoPrefix => "c-no-prefix",
            WorkloadName::Burst => "d-burst",
            WorkloadName::SharedChat => "e-shared-chat",
            WorkloadName::Adapters => "h-adapters",
            WorkloadName::TwoModels => "i-two-models",
            WorkloadName::Heterogeneous => "f-heterogeneous",
            WorkloadName::MixedLengths => "l-mixed-lengths",
            WorkloadName::Ladder => "g-ladder",
            WorkloadName::LadderLlmD => "o-ladder-llm-d",
            WorkloadName::Agents => "m-agents",
            WorkloadName::MessagesAgents => "n-messages-agents",
        }
    }
}

/// Full size for the report, or a smoke run of a few minutes (`BENCH_QUICK=1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    Full,
    Quick,
}

impl Size {
    /// `full` or `quick` depending on the size.
    pub fn pick(self, full: usize, quick: usize) -> usize {
        match self {
            Size::Full => full,
            Size::Quick => quick,
        }
    }
}

/// The model name every pod serves and every request asks for.
pub const MODEL: &str = "sim-model";

/// One unit of closed-loop work: a client slot is busy until the whole job is done.
#[derive(Debug, Clone)]
pub enum Job {
    /// One `/v1/completions` request.
    Completion { prompt: String, max_tokens: usize },
    /// A conversation on `/v1/chat/completions`: each turn re-sends the whole history (system
    /// prompt, earlier user turns and the replies the pod gave), as chat clients do. The user
    /// "thinks" `think_ms[i]` before turn `i + 1`.
    Chat { system: String, user_turns: Vec<String>, think_ms: Vec<u64>, max_tokens: usize },
    /// One `/v1/completions` request for `model` (a base model or a LoRA adapter).
    ForModel { model: String, prompt: String, max_tokens: usize },
    /// `job`, sent `at_ms` after the replay starts (open loop: give every job its own slot).
    Scheduled { at_ms: u64, job: Box<Job> },
    /// An agent's session on `/v1/responses`: every turn resends `instructions` and the whole
    /// conversation (the task, then per turn the answer, a `function_call`, its output and the
    /// next step), after the tool's run of `think_ms[i]` before turn `i + 1`.
    /// The same session on the Anthropic Messages API with `api` [`AgentApi::Messages`].
    Agent {
        api: AgentApi,
        instructions: String,
        task: String,
        turns: Vec<AgentTurn>,
        think_ms: Vec<u64>,
        max_tokens: usize,
    },
}

/// Which API an agent's session speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentApi {
    /// `/v1/responses` (Codex, the OpenAI Agents SDK).
    Responses,
    /// `/v1/messages` (Claude Code, Anthropic's SDKs).
    Messages,
}

/// What an agent adds to its conversation after one answer.
#[derive(Debug, Clone)]
pub struct AgentTurn {
    pub tool_arguments: String,
    pub tool_output: String,
    pub next_step: String,
}

/// A pool shape and the jobs to replay on it.
#[derive(Debug, Clone)]
pub struct Workload {
    pub name: WorkloadName,
    pub pods: usize,
    /// Simulator flags besides host, port and time scale.
    pub pod_args: Vec<String>,
    /// Client slots; equal to the number of jobs for a burst (everything released at once).
    pub concurrency: usize,
    pub jobs: Vec<Job>,
    /// Open-loop workloads whose rate steps: each stage's window, reported apart (empty for
    /// the others).
    pub stages: Vec<Stage>,
}

/// One step of a rate ladder: requests scheduled in `start_ms..end_ms` arrive at `rate_per_s`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stage {
    pub rate_per_s: f64,
    pub start_ms: u64,
    pub end_ms: u64,
}

impl Workload {
    /// The workload `name` at `size`, fixed by `seed`.
    pub fn build(name: WorkloadName, size: Size, seed: u64) -> Self {
        match name {
            WorkloadName::SharedPrefix => shared_prefix::build(size, seed),
            WorkloadName::MultiTurn => multi_turn::build(size, seed),
            WorkloadName::NoPrefix => no_prefix::build(size, seed),
            WorkloadName::Burst => burst::build(size, seed),
            WorkloadName::SharedChat => shared_chat::build(size, seed),
            WorkloadName::Adapters => crate::models::build_adapters(size, seed),
            WorkloadName::TwoModels => crate::models::build_two_models(size, seed),
            WorkloadName::Heterogeneous => heterogeneous::build(size, seed),
            WorkloadName::MixedLengths => mixed_lengths::build(size, seed),
            WorkloadName::Ladder => ladder::build(size, seed),
            WorkloadName::LadderLlmD => llm_d_ladder::build(size, seed),
            WorkloadName::Agents => agents::build(size, seed, AgentApi::Responses),
            WorkloadName::MessagesAgents => agents::build(size, seed, AgentApi::Messages),
        }
    }

    /// Requests the workload sends when nothing fails.
    pub fn request_count(&self) -> usize {
        self.jobs
            .iter()
            .map(|job| match job {
                Job::ForModel { .. } => 1,
                Job::Chat { user_turns, .. } => user_turns.len(),
                Job::Agent { turns, .. } => turns.len(),
                Job::Completion { .. } | Job::Scheduled { .. } => 1,
            })
            .sum()
    }

    /// Every pod's flags: the workload's shared ones, then pod `index`'s own (models workloads).
    pub fn pod_args_of(&self, index: usize) -> Vec<String> {
        let mut args = self.pod_args.clone();
        args.extend(crate::models::per_pod_args(self, index));
        if self.name == WorkloadName::Heterogeneous {
            args.extend(heterogeneous::prefill_slowdown_args(index));
        }
        args
    }
}

/// Simulator flags every workload shares: the small preset (Qwen3-0.6B on one GPU) and vLLM's
/// block size, plus the workload's own pressure settings.
pub(crate) fn pod_args(max_num_seqs: usize, num_gpu_blocks: usize, max_model_len: usize) -> Vec<String> {
    [
        "--preset",
        "small",
        "--model",
        MODEL,
        "--block-size",
        "16",
        "--max-num-seqs",
        &max_num_seqs.to_string(),
        "--num-gpu-blocks",
        &num_gpu_blocks.to_string(),
        "--max-model-len",
        &max_model_len.to_string(),
    ]
    .iter()
    .map(|flag| flag.to_string())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_are_reproducible_and_sized() {
        for name in [
            WorkloadName::SharedPrefix,
            WorkloadName::MultiTurn,
            WorkloadName::NoPrefix,
            WorkloadName::Burst,
            WorkloadName::SharedChat,
            WorkloadName::Adapters,
            WorkloadName::TwoModels,
            WorkloadName::Heterogeneous,
            WorkloadName::MixedLengths,
            WorkloadName::Ladder,
            WorkloadName::LadderLlmD,
            WorkloadName::Agents,
            WorkloadName::MessagesAgents,
        ] {
            let first = Workload::build(name, Size::Quick, 7);
            let again = Workload::build(name, Size::Quick, 7);
            assert_eq!(format!("{:?}", first.jobs), format!("{:?}", again.jobs));
            assert!(first.request_count() < Workload::build(name, Size::Full, 7).request_count());
            assert!(first.pods >= 2 && first.concurrency >= 1);
        }
    }
}
