//! What goes in and out of the scheduler: new requests, step plans and outputs, counters.

/// Identifies one engine request (one prompt of one HTTP request).
pub type RequestId = u64;

/// A request entering the waiting queue.
#[derive(Debug, Clone)]
pub struct NewRequest {
    /// Unique id.
    pub id: RequestId,
    /// Prompt tokens.
    pub tokens: Vec<u32>,
    /// LoRA adapter, `None` for the base model.
    pub lora: Option<String>,
    /// `cache_salt`: requests share cached blocks only with requests of the same salt.
    pub cache_salt: Option<String>,
    /// Tokens to generate (at least 1); the request finishes on its last one.
    pub max_tokens: usize,
    /// Seeds the generated token ids (see `tokenizer::output_word`).
    pub stream_seed: u64,
}

/// A request that was just admitted to the running batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// The request.
    pub id: RequestId,
    /// Tokens it brings (prompt, plus generated tokens after a preemption).
    pub num_tokens: usize,
    /// Tokens found in the prefix cache (never computed).
    pub cached_tokens: usize,
    /// Whether this is a re-admission after a preemption.
    pub resumed: bool,
    /// Running requests right after this admission.
    pub running: usize,
}

/// One sequence's share of a step: `num_tokens` new tokens computed over its context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledChunk {
    /// The request.
    pub id: RequestId,
    /// Tokens computed in this step (1 for a decode, up to the budget for a prefill chunk).
    pub num_tokens: usize,
    /// Tokens whose KV the chunk attends over (already computed plus this chunk).
    pub context_tokens: usize,
}

/// What one engine step computes, decided at its start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepPlan {
    /// Scheduled sequences: decodes first, then prefill chunks, then new admissions.
    pub chunks: Vec<ScheduledChunk>,
    /// Requests admitted from the waiting queue by this step.
    pub admitted: Vec<Admission>,
    /// Requests preempted by this step (back at the head of the waiting queue).
    pub preempted: Vec<RequestId>,
    /// LoRA adapters this step loads onto the GPU (each costs `lora_load_ms`).
    pub adapter_loads: usize,
}

/// The work of a step, as the latency model charges it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepWork {
    /// Sequences computing exactly one token (decodes).
    pub decode_seqs: usize,
    /// Tokens of chunks longer than one token (prefill).
    pub prefill_tokens: usize,
    /// Prompt tokens found in the prefix cache by the requests admitted in this step.
    pub cached_tokens: usize,
    /// Sum over scheduled sequences of the context they attend over.
    pub context_tokens: usize,
    /// LoRA adapters loaded onto the GPU before the step can run.
    pub adapter_loads: usize,
}

impl StepPlan {
    /// Whether the step computes nothing (the engine is idle).
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Tokens computed by the step (`num_batched_tokens` in vLLM).
    pub fn num_batched_tokens(&self) -> usize {
        self.chunks.iter().map(|chunk| chunk.num_tokens).sum()
    }

    /// The step's work for the latency model.
    pub fn work(&self) -> StepWork {
        let mut work = StepWork {
            cached_tokens: self.admitted.iter().map(|admission| admission.cached_tokens).sum(),
            adapter_loads: self.adapter_loads,
            ..StepWork::default()
        };
        for chunk in &self.chunks {
            if chunk.num_tokens == 1 {
                work.decode_seqs += 1;
            } else {
                work.prefill_tokens += chunk.num_tokens;
            }
            work.context_tokens += chunk.context_tokens;
        }
        work
    }
}

/// A token sampled at the end of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepOutput {
    /// The request.
    pub id: RequestId,
    /// Position of the token in the output (0 = first token).
    pub index: usize,
    /// Whether it is the last token (the request has finished and left the engine).
    pub last: bool,
}

/// Prefix cache counters in tokens, as vLLM's `PrefixCacheStats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Requests looked up (first admissions only).
    pub requests: u64,
    /// Tokens looked up: `vllm:prefix_cache_queries_total`.
    pub queries: u64,
    /// Tokens found: `vllm:prefix_cache_hits_total`.
    pub hits: u64,
    /// Tokens looked up again by preempted requests (not part of `queries`).
    pub preempted_queries: u64,
    /// Tokens found by preempted requests (not part of `hits`).
    pub preempted_hits: u64,
}
