//! One pod's configuration: presets, limits, and validation before anything starts.
//!
//! A bad configuration fails at start with a clear message rather than misbehaving under load,
//! in particular when the KV pool could not hold a single request of `max_model_len` tokens.

use crate::latency::LatencyParams;

/// Largest block size accepted (vLLM uses 16 on GPUs; some backends use up to 256).
pub const MAX_BLOCK_SIZE: usize = 256;
/// Largest KV pool accepted: about 64 bytes of bookkeeping per block keeps a pod under 300 MB.
pub const MAX_GPU_BLOCKS: usize = 4 << 20;
/// Largest `max_num_seqs` accepted (vLLM's own defaults are 256 to 1024).
pub const MAX_NUM_SEQS: usize = 65_536;
/// Largest waiting-queue bound accepted.
pub const MAX_WAITING_BOUND: usize = 1 << 20;
/// Largest step token budget accepted (vLLM's defaults are 2,048 to 16,384).
pub const MAX_BATCHED_TOKENS: usize = 1 << 20;
/// vLLM V1's `max_num_batched_tokens` for the OpenAI server on a GPU with at least 70 GiB
/// (H100, A100-80G); smaller GPUs get 2,048 (`EngineArgs._set_default_args_v1`).
pub const DEFAULT_MAX_NUM_BATCHED_TOKENS: usize = 8192;
/// KV transfer per prompt token, ms: an 8B model's KV is about 128 KiB per token, which NIXL
/// over a 25 GB/s RDMA link moves in about 5 µs (an 8k-token prompt in about 40 ms).
pub const DEFAULT_KV_TRANSFER_PER_TOKEN_MS: f64 = 0.005;
/// Most LoRA adapters one pod knows at once (flags plus runtime loads). vLLM bounds the
/// adapters held in memory (`--max-cpu-loras`), not those registered: a multi-tenant pod may
/// register hundreds, more than a gateway's lists keep.
pub const MAX_LORA_ADAPTERS: usize = 1024;

/// Time to bring an adapter onto the GPU, ms: a rank-16 adapter of a small model is tens of
/// MB copied from host memory; a modelling choice, not a measurement (`--lora-load-ms`).
pub const DEFAULT_LORA_LOAD_MS: f64 = 25.0;

/// Which real deployment the defaults imitate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// Qwen3-0.6B-FP8 on one GPU (calibrated against real vLLM; see the README).
    Small,
    /// A 70B model on a multi-GPU node: slower prefill and decode, smaller KV pool in tokens.
    Large,
}

/// Which engine's metric names `/metrics` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricsStyle {
    /// vLLM V1 names (`vllm:kv_cache_usage_perc`, `vllm:prefix_cache_queries_total`, ...).
    Vllm,
    /// Older vLLM names (`vllm:gpu_cache_usage_perc`, `vllm:gpu_prefix_cache_*`).
    VllmLegacy,
    /// SGLang names (`sglang:num_queue_reqs`, `sglang:num_running_reqs`, `sglang:token_usage`).
    Sglang,
}

impl Preset {
    /// Lower-case name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Small => "small",
            Preset::Large => "large",
        }
    }

    /// Latency parameters of this preset (time scale 1, no jitter).
    pub fn latency(self) -> LatencyParams {
        match self {
            Preset::Small => LatencyParams {
                api_overhead_ms: 30.0,
                prefill_per_token_ms: 0.02,
                prefill_per_cached_token_ms: 0.001,
                decode_base_ms: 13.0,
                decode_per_seq_ms: 0.5,
                context_per_ktoken_ms: 0.04,
                jitter: 0.0,
                time_scale: 1.0,
            },
            Preset::Large => LatencyParams {
                api_overhead_ms: 40.0,
                prefill_per_token_ms: 0.06,
                prefill_per_cached_token_ms: 0.001,
                decode_base_ms: 30.0,
                decode_per_seq_ms: 0.25,
                context_per_ktoken_ms: 0.03,
                jitter: 0.0,
                time_scale: 1.0,
            },
        }
    }

    /// KV pool size in blocks of 16 tokens.
    pub fn num_gpu_blocks(self) -> usize {
        match self {
            Preset::Small => 16_384,
            Preset::Large => 8_192,
        }
    }

    /// Longest prompt plus output, in tokens.
    pub fn max_model_len(self) -> usize {
        match self {
            Preset::Small => 40_960,
            Preset::Large => 32_768,
        }
    }
}

/// Everything one simulated pod needs.
#[derive(Debug, Clone)]
pub struct PodConfig {
    /// Address to bind.
    pub host: String,
    /// Port to bind (0 picks a free one; the real port is written back after binding).
    pub port: u16,
    /// Served model name (the base model).
    pub model: String,
    /// Preset the defaults came from.
    pub preset: Preset,
    /// Most sequences running at once.
    pub max_num_seqs: usize,
    /// Token budget of one engine step (decodes plus prefill chunks).
    pub max_num_batched_tokens: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV pool size in blocks.
    pub num_gpu_blocks: usize,
    /// Longest prompt plus output, in tokens.
    pub max_model_len: usize,
    /// A new request that would wait behind this many others is refused with 503.
    pub max_waiting: usize,
    /// Output length when a request gives no `max_tokens`.
    pub default_max_tokens: usize,
    /// Latency model.
    pub latency: LatencyParams,
    /// Seed for jitter and fault draws.
    pub seed: u64,
    /// Metric names on `/metrics`.
    pub metrics_style: MetricsStyle,
    /// Whether LoRA is enabled (implied by adapters on the command line).
    pub lora_enabled: bool,
    /// Adapters loaded at start.
    pub lora_adapters: Vec<String>,
    /// Most distinct adapters in the running batch, and adapters resident on the GPU.
    pub max_loras: usize,
    /// Role in a prefill/decode pool (`--role`).
    pub role: crate::pd::PodRole,
    /// KV transfer time per prompt token a decode pod pulls from a prefill pod, ms.
    pub kv_transfer_per_token_ms: f64,
    /// Simulated time to load an adapter onto the GPU, charged to the step that admits it.
    pub lora_load_ms: f64,
    /// Keep Responses API answers for `previous_response_id` (`--responses-store`), as vLLM
    /// does with `VLLM_ENABLE_RESPONSES_API_STORE=1`.
    pub responses_store: bool,
    /// Report `usage.prompt_tokens_details.cached_tokens` (`--enable-prompt-tokens-details`,
    /// off by default as in vLLM); without it vLLM's chat and completions never show cached tokens.
    pub prompt_tokens_details: bool,
}

impl PodConfig {
    /// Defaults of `preset` on 127.0.0.1 with an ephemeral port.
    pub fn for_preset(preset: Preset) -> Self {
        Self {
            host: "127.0.0.1".to_owned(),
            port: 0,
            model: "sim-model".to_owned(),
            preset,
            max_num_seqs: 256,
            max_num_batched_tokens: DEFAULT_MAX_NUM_BATCHED_TOKENS,
            block_size: 16,
            num_gpu_blocks: preset.num_gpu_blocks(),
            max_model_len: preset.max_model_len(),
            max_waiting: 4096,
            default_max_tokens: 16,
            latency: preset.latency(),
            seed: 0,
            metrics_style: MetricsStyle::Vllm,
            lora_enabled: false,
            lora_adapters: Vec::new(),
            max_loras: 1,
            role: crate::pd::PodRole::Both,
            kv_transfer_per_token_ms: DEFAULT_KV_TRANSFER_PER_TOKEN_MS,
            lora_load_ms: DEFAULT_LORA_LOAD_MS,
            responses_store: false,
            prompt_tokens_details: false,
        }
    }

    /// [`host_port`] of this pod: the value of the `x-served-by` header.
    pub fn served_by(&self) -> String {
        host_port(&self.host, self.port)
    }

    /// Checks limits and consistency; the message names the offending flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.block_size == 0 || self.block_size > MAX_BLOCK_SIZE {
            return Err(format!("--block-size must be 1..={MAX_BLOCK_SIZE}"));
        }
        if self.num_gpu_blocks == 0 || self.num_gpu_blocks > MAX_GPU_BLOCKS {
            return Err(format!("--num-gpu-blocks must be 1..={MAX_GPU_BLOCKS}"));
        }
        if self.max_model_len == 0 || self.max_model_len.div_ceil(self.block_size) > self.num_gpu_blocks {
            return Err(format!(
                "--max-model-len {} needs {} blocks of {} tokens but --num-gpu-blocks is {} (vLLM refuses to start too)",
                self.max_model_len,
                self.max_model_len.div_ceil(self.block_size),
                self.block_size,
                self.num_gpu_blocks
            ));
        }
        if self.max_num_seqs == 0 || self.max_num_seqs > MAX_NUM_SEQS {
            return Err(format!("--max-num-seqs must be 1..={MAX_NUM_SEQS}"));
        }
        if self.max_num_batched_tokens == 0 || self.max_num_batched_tokens > MAX_BATCHED_TOKENS {
            return Err(format!("--max-num-batched-tokens must be 1..={MAX_BATCHED_TOKENS}"));
        }
        if self.max_waiting > MAX_WAITING_BOUND {
            return Err(format!("--max-waiting must be at most {MAX_WAITING_BOUND}"));
        }
        if self.default_max_tokens == 0 {
            return Err("--default-max-tokens must be at least 1".to_owned());
        }
        if self.max_loras == 0 {
            return Err("--max-loras must be at least 1".to_owned());
        }
        if self.lora_adapters.len() > MAX_LORA_ADAPTERS {
            return Err(format!("at most {MAX_LORA_ADAPTERS} LoRA adapters"));
        }
        if self.lora_adapters.iter().any(|name| name.is_empty() || *name == self.model) {
            return Err("LoRA adapter names must be non-empty and differ from --model".to_owned());
        }
        if !self.kv_transfer_per_token_ms.is_finite() || self.kv_transfer_per_token_ms < 0.0 {
            return Err(format!(
                "--kv-transfer-per-token-ms must be a finite number >= 0, got {}",
                self.kv_transfer_per_token_ms
            ));
        }
        if !self.lora_load_ms.is_finite() || self.lora_load_ms < 0.0 {
            return Err("--lora-load-ms must be a finite number >= 0".to_owned());
        }
        validate_latency(&self.latency)
    }
}

fn validate_latency(latency: &LatencyParams) -> Result<(), String> {
    let named = [
        ("--api-overhead-ms", latency.api_overhead_ms),
        ("--prefill-per-token-ms", latency.prefill_per_token_ms),
        ("--prefill-per-cached-token-ms", latency.prefill_per_cached_token_ms),
        ("--decode-base-ms", latency.decode_base_ms),
        ("--decode-per-seq-ms", latency.decode_per_seq_ms),
        ("--context-per-ktoken-ms", latency.context_per_ktoken_ms),
        ("--jitter", latency.jitter),
        ("--time-scale", latency.time_scale),
    ];
    match named.iter().find(|(_, value)| !value.is_finite() || *value < 0.0) {
        Some((flag, value)) => Err(format!("{flag} must be a finite number >= 0, got {value}")),
        None => Ok(()),
    }
}

/// `host:port`, `[host]:port` for an IPv6 host: how pools, the destination header and
/// `x-served-by` write a pod's address.
pub fn host_port(host: &str, port: u16) -> String {
    match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_host_is_bracketed_as_pool_addresses_are() {
        assert_eq!(host_port("127.0.0.1", 8001), "127.0.0.1:8001");
        assert_eq!(host_port("::1", 8001), "[::1]:8001");
    }

    #[test]
    fn presets_are_valid() {
        assert_eq!(PodConfig::for_preset(Preset::Small).validate(), Ok(()));
        assert_eq!(PodConfig::for_preset(Preset::Large).validate(), Ok(()));
    }

    #[test]
    fn a_pool_that_cannot_hold_one_request_is_refused() {
        let mut config = PodConfig::for_preset(Preset::Small);
        config.num_gpu_blocks = 10;
        assert!(config.validate().unwrap_err().contains("--max-model-len"));
        config.max_model_len = 160;
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn bad_numbers_name_their_flag() {
        let mut config = PodConfig::for_preset(Preset::Small);
        config.latency.time_scale = -1.0;
        assert!(config.validate().unwrap_err().contains("--time-scale"));
        let mut config = PodConfig::for_preset(Preset::Small);
        config.lora_adapters = vec!["sim-model".to_owned()];
        assert!(config.validate().is_err());
    }
}
