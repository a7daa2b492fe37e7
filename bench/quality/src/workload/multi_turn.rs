//! (b) Multi-turn chats under KV pressure, the case prefix-aware routing exists for.
//!
//! 64 prefix groups (think: 64 applications, each with its own system prompt) with Zipf
//! popularity (s = 1.1: the top group draws a quarter of the conversations). Each
//! conversation re-sends its growing history every turn, so a router that keeps a conversation
//! and its group on one pod gets both the system prompt and the history from cache.
//!
//! Pressure, on purpose: a pod has 384 blocks of 16 tokens (6,144 tokens), enough for six of
//! the 64 system prompts of 1,024 tokens when idle and about four beside two running
//! conversations. All 64 prompts (4,096 blocks) do not even fit in the pool's 3,072 blocks, so
//! only a router that keeps each popular group on few pods keeps it cached; a prefix-blind
//! router makes every pod cycle through all groups and evict. Measured with the seed 42
//! (bench/README.md): with room for everything (16,384 blocks) Envoy round robin and
//! least-request hit 50-51%; with 384 blocks both hit 39%, while vllm-router's cache-aware
//! policy stays at 86% in both.

use super::{pod_args, Job, Size, Workload, WorkloadName};
use crate::prompts::{text_of_tokens, SeededRandom, Zipf};

const PODS: usize = 8;
const GROUPS: usize = 64;
const ZIPF_EXPONENT: f64 = 1.1;
const SYSTEM_TOKENS: usize = 1024;
const USER_TOKENS: usize = 96;
const MIN_TURNS: usize = 3;
const MAX_TURNS: usize = 5;
const OUTPUT_TOKENS: usize = 64;
/// Conversations in progress at once (a conversation holds its slot while the user thinks).
const CONCURRENCY: usize = 16;
/// Pause before each follow-up turn, uniform in 0..=this. Without it a closed loop of 16 slots
/// over 8 pods falls into lockstep with round robin (each slot's next request lands 16 picks
/// later, on the same pod), and round robin's hit rate swung between 34% and 50% from run to
/// run; random pauses give it the affinity of chance that real users give it.
const MAX_THINK_MS: usize = 1000;
/// See the module docs: the pressure that separates prefix-aware from prefix-blind routing.
const NUM_GPU_BLOCKS: usize = 384;
/// Twice the usual two conversations per pod: a router may pile a hot group on one pod
/// without hitting the limit at once, but not without bound.
const MAX_NUM_SEQS: usize = 8;
/// Longest conversation: 1,024 + 5 × (96 + 64) tokens plus template, well under this.
const MAX_MODEL_LEN: usize = 4096;

pub fn build(size: Size, seed: u64) -> Workload {
    let conversations = size.pick(96, 24);
    let zipf = Zipf::new(GROUPS, ZIPF_EXPONENT);
    let mut random = SeededRandom::new(seed ^ 0xb);
    let jobs = (0..conversations)
        .map(|conversation| {
            let group = zipf.draw(&mut random);
            let turns = random.between(MIN_TURNS, MAX_TURNS);
            let user_turns = (0..turns)
                .map(|turn| {
                    text_of_tokens(USER_TOKENS, seed ^ (((conversation as u64) << 8) | turn as u64) ^ 0xb000_0000)
                })
                .collect();
            let think_ms = (1..turns).map(|_| random.between(0, MAX_THINK_MS) as u64).collect();
            let system = text_of_tokens(SYSTEM_TOKENS, seed ^ (2000 + group as u64));
            Job::Chat { system, user_turns, think_ms, max_tokens: OUTPUT_TOKENS }
        })
        .collect();
    Workload {
        name: WorkloadName::MultiTurn,
        pods: PODS,
        pod_args: pod_args(MAX_NUM_SEQS, NUM_GPU_BLOCKS, MAX_MODEL_LEN),
        concurrency: CONCURRENCY,
        jobs,
        stages: Vec::new(),
    }
}
