//! (m) Agents on the Responses API: the loop of a coding agent (Codex and the OpenAI Agents SDK
//! call `/v1/responses`) resends its whole conversation every turn, `instructions` first.
//! (n) The same sessions on the Anthropic Messages API, as Claude Code calls vLLM's
//! `/v1/messages`: `system`, then the messages with `tool_use` and `tool_result` blocks.
//!
//! 48 agent sessions of 8 agent kinds (each kind its own 4,096-token instructions: an agent's
//! system prompt and tool schemas are long), 16 running at once. Each session runs 8 turns;
//! after each answer the agent "runs a tool": it appends the answer, a `function_call`, the
//! tool's 512-token output and a short next step, waits 0-800 ms, and sends the lot again. By
//! its last turn a session's prompt is ~9k tokens, all but the newest ~600 already sent.
//!
//! Pressure, on purpose: a pod has 3,072 blocks of 16 tokens (48k tokens). Sessions kept on
//! their pod (16 running over 4 pods, ~4 each at ~6k tokens on average, plus their kinds'
//! instructions) about fit; a router that sends each turn anywhere puts every running
//! session's history on every pod (~100k tokens each), and the pods evict what the next turn
//! needs.

use super::{pod_args, AgentApi, AgentTurn, Job, Size, Workload, WorkloadName};
use crate::prompts::{text_of_tokens, SeededRandom};

const PODS: usize = 4;
const KINDS: usize = 8;
const INSTRUCTIONS_TOKENS: usize = 4096;
const TASK_TOKENS: usize = 64;
const TOOL_OUTPUT_TOKENS: usize = 512;
const NEXT_STEP_TOKENS: usize = 32;
const TURNS: usize = 8;
const OUTPUT_TOKENS: usize = 48;
const CONCURRENCY: usize = 16;
/// The tool's run between two turns, uniform in 0..=this.
const MAX_TOOL_MS: usize = 800;
/// See the module docs.
const NUM_GPU_BLOCKS: usize = 3072;
const MAX_NUM_SEQS: usize = 8;
/// The longest session: 4,096 + 64 + 8 × (48 + 512 + 32 + ~20) tokens plus template, ~9k.
const MAX_MODEL_LEN: usize = 16384;

/// Workload m on `AgentApi::Responses`, n on `AgentApi::Messages`: the same sessions.
pub fn build(size: Size, seed: u64, api: AgentApi) -> Workload {
    let sessions = size.pick(48, 12);
    let mut random = SeededRandom::new(seed ^ 0x6d);
    let jobs = (0..sessions)
        .map(|session| {
            let kind = random.between(0, KINDS - 1);
            let own = |part: u64| seed ^ ((session as u64) << 16) ^ (part << 4) ^ 0x6d00_0000;
            let turns = (0..TURNS)
                .map(|turn| AgentTurn {
                    tool_arguments: format!("{{\"cmd\":\"step {turn} of session {session}\"}}"),
                    tool_output: text_of_tokens(TOOL_OUTPUT_TOKENS, own(turn as u64 * 2 + 1)),
                    next_step: text_of_tokens(NEXT_STEP_TOKENS, own(turn as u64 * 2 + 2)),
                })
                .collect();
            Job::Agent {
                api,
                instructions: text_of_tokens(INSTRUCTIONS_TOKENS, seed ^ (0x6d_0000 + kind as u64)),
                task: text_of_tokens(TASK_TOKENS, own(0)),
                turns,
                think_ms: (1..TURNS).map(|_| random.between(0, MAX_TOOL_MS) as u64).collect(),
                max_tokens: OUTPUT_TOKENS,
            }
        })
        .collect();
    Workload {
        name: match api {
            AgentApi::Responses => WorkloadName::Agents,
            AgentApi::Messages => WorkloadName::MessagesAgents,
        },
        pods: PODS,
        pod_args: pod_args(MAX_NUM_SEQS, NUM_GPU_BLOCKS, MAX_MODEL_LEN),
        concurrency: CONCURRENCY,
        jobs,
        stages: Vec::new(),
    }
}
