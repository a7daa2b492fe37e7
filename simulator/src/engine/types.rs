//! What goes in and out of the scheduler: new requests, admissions, step outcomes, counters.

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
}

/// A request that was just admitted to the running batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// The request.
    pub id: RequestId,
    /// Tokens it brings (prompt, plus generated tokens after a preemption).
    pub num_tokens: usize,
    /// Tokens found in the prefix cache.
    pub cached_tokens: usize,
    /// Whether this is a re-admission after a preemption.
    pub resumed: bool,
    /// Running requests right after this admission.
    pub running: usize,
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

/// What happened when a generated token was appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutcome {
    /// The token has its KV slot.
    Appended,
    /// No block was free: the request went back to the head of the waiting queue.
    Preempted,
    /// The request is not running (aborted, or the pod restarted).
    Unknown,
}
