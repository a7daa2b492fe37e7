//! Command-line flags of `vllm-sim`, turned into one validated `PodConfig` per port.
//!
//! Every latency parameter is a flag that overrides the preset; `--ports` starts several
//! independent pods (own cache, scheduler, metrics and counters) in one process to save memory.

use clap::Parser;

use crate::config::{MetricsStyle, PodConfig, Preset};

/// Most pods one process serves (`--ports`); each is cheap, but a typo should not open 10k ports.
pub const MAX_PODS_PER_PROCESS: usize = 64;

/// A simulated vLLM server (V1 engine semantics): prefix cache, scheduler, latency, metrics.
#[derive(Debug, Clone, Parser)]
// A flag or option given twice takes its last value, as vLLM's argparse does (the launcher
// passes --enable-prompt-tokens-details, and a caller's own copy must not stop the pod).
#[command(name = "vllm-sim", version, about, args_override_self = true)]
pub struct Cli {
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port of a single pod.
    #[arg(long, conflicts_with = "ports")]
    pub port: Option<u16>,
    /// Ports of several independent pods in one process, e.g. 8001,8002,8003,8004.
    #[arg(long, value_delimiter = ',')]
    pub ports: Vec<u16>,
    /// Served model name.
    #[arg(long, default_value = "sim-model")]
    pub model: String,
    /// Defaults to imitate: small ≈ Qwen3-0.6B-FP8 on one GPU, large ≈ a 70B model.
    #[arg(long, value_enum, default_value_t = Preset::Small)]
    pub preset: Preset,
    /// Most running sequences [default: 256].
    #[arg(long)]
    pub max_num_seqs: Option<usize>,
    /// Token budget of one engine step: decodes plus prefill chunks (vLLM's default on H100).
    #[arg(long, default_value_t = crate::config::DEFAULT_MAX_NUM_BATCHED_TOKENS)]
    pub max_num_batched_tokens: usize,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// KV pool size in blocks [default: small 16384, large 8192].
    #[arg(long)]
    pub num_gpu_blocks: Option<usize>,
    /// Longest prompt plus output [default: small 40960, large 32768].
    #[arg(long)]
    pub max_model_len: Option<usize>,
    /// Refuse (503) a new request that would wait behind this many others (0 = never queue).
    #[arg(long, default_value_t = 4096)]
    pub max_waiting: usize,
    /// Output tokens when a request sets no max_tokens (clamped to max_model_len).
    #[arg(long, default_value_t = 16)]
    pub default_max_tokens: usize,
    /// Time from a step's end to its tokens reaching the client, ms [preset].
    #[arg(long)]
    pub api_overhead_ms: Option<f64>,
    /// Prefill time per uncached prompt token, ms [preset].
    #[arg(long)]
    pub prefill_per_token_ms: Option<f64>,
    /// Prefill time per cached prompt token, ms [preset].
    #[arg(long)]
    pub prefill_per_cached_token_ms: Option<f64>,
    /// Step time with nothing in the batch, ms [preset].
    #[arg(long)]
    pub decode_base_ms: Option<f64>,
    /// Extra step time per sequence decoding one token, ms [preset].
    #[arg(long)]
    pub decode_per_seq_ms: Option<f64>,
    /// Step time per 1,000 tokens of context the scheduled sequences attend over, ms [preset].
    #[arg(long)]
    pub context_per_ktoken_ms: Option<f64>,
    /// Seed for jitter and fault draws.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Bounded random fraction applied to every delay (0..0.5).
    #[arg(long, default_value_t = 0.0)]
    pub jitter: f64,
    /// Metric names on /metrics.
    #[arg(long, value_enum, default_value_t = MetricsStyle::Vllm)]
    pub metrics_style: MetricsStyle,
    /// Enable LoRA (implied by --lora-adapters); needed for runtime loading.
    #[arg(long)]
    pub enable_lora: bool,
    /// LoRA adapters loaded at start, e.g. a,b.
    #[arg(long, value_delimiter = ',')]
    pub lora_adapters: Vec<String>,
    /// Most distinct adapters in the running batch.
    #[arg(long, default_value_t = 1)]
    pub max_loras: usize,
    /// Time to load a LoRA adapter onto the GPU (each load also evicts one when slots are full), ms.
    #[arg(long, default_value_t = crate::config::DEFAULT_LORA_LOAD_MS)]
    pub lora_load_ms: f64,
    /// Multiply every simulated time (0 = answer as fast as possible).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Role in a prefill/decode pool; decode and both act on `x-prefiller-host-port`.
    #[arg(long, value_enum, default_value_t = crate::pd::PodRole::Both)]
    pub role: crate::pd::PodRole,
    /// KV transfer time per prompt token pulled from a prefill pod, ms.
    #[arg(long, default_value_t = crate::config::DEFAULT_KV_TRANSFER_PER_TOKEN_MS)]
    pub kv_transfer_per_token_ms: f64,
    /// Prefill time multiplier per pod (2.5 = a pod 2.5× slower at prefill, an older GPU or
    /// a degraded one): one value for every port, or one per port in `--ports` order.
    #[arg(long, value_delimiter = ',')]
    pub prefill_slowdown: Vec<f64>,
    /// Keep Responses API answers in memory so `previous_response_id` can continue them (vLLM's
    /// `VLLM_ENABLE_RESPONSES_API_STORE=1`); without it such a request is refused.
    #[arg(long)]
    pub responses_store: bool,
    /// Report `usage.prompt_tokens_details.cached_tokens` on chat and completions, as vLLM's
    /// flag of the same name (off by default, as there); routers that learn from cached tokens need it.
    #[arg(long)]
    pub enable_prompt_tokens_details: bool,
}

impl Cli {
    /// One validated configuration per port.
    pub fn pod_configs(&self) -> Result<Vec<PodConfig>, String> {
        let ports = match (self.port, self.ports.is_empty()) {
            (Some(port), _) => vec![port],
            (None, false) => self.ports.clone(),
            (None, true) => vec![8001],
        };
        if ports.len() > MAX_PODS_PER_PROCESS {
            return Err(format!("at most {MAX_PODS_PER_PROCESS} ports per process"));
        }
        let slowdowns = match self.prefill_slowdown.as_slice() {
            [] => vec![1.0; ports.len()],
            [one] => vec![*one; ports.len()],
            many if many.len() == ports.len() => many.to_vec(),
            many => return Err(format!("--prefill-slowdown: {} values for {} ports", many.len(), ports.len())),
        };
        if let Some(bad) = slowdowns.iter().find(|s| !(s.is_finite() && (0.01..=100.0).contains(*s))) {
            return Err(format!("--prefill-slowdown {bad}: must be within 0.01..=100"));
        }
        ports.into_iter().zip(slowdowns).map(|(port, slowdown)| self.pod_config(port, slowdown)).collect()
    }

    fn pod_config(&self, port: u16, prefill_slowdown: f64) -> Result<PodConfig, String> {
        let mut config = PodConfig::for_preset(self.preset);
        config.host = self.host.clone();
        config.port = port;
        config.model = self.model.clone();
        config.max_num_seqs = self.max_num_seqs.unwrap_or(config.max_num_seqs);
        config.max_num_batched_tokens = self.max_num_batched_tokens;
        config.block_size = self.block_size;
        // The preset's pool is sized in 16-token blocks; keep its token capacity for other sizes.
        let preset_tokens = config.num_gpu_blocks * 16;
        config.num_gpu_blocks = self.num_gpu_blocks.unwrap_or(preset_tokens / self.block_size.max(1));
        config.max_model_len = self.max_model_len.unwrap_or(config.max_model_len);
        config.max_waiting = self.max_waiting;
        config.default_max_tokens = self.default_max_tokens;
        let latency = &mut config.latency;
        latency.api_overhead_ms = self.api_overhead_ms.unwrap_or(latency.api_overhead_ms);
        latency.prefill_per_token_ms = self.prefill_per_token_ms.unwrap_or(latency.prefill_per_token_ms);
        latency.prefill_per_cached_token_ms =
            self.prefill_per_cached_token_ms.unwrap_or(latency.prefill_per_cached_token_ms);
        latency.decode_base_ms = self.decode_base_ms.unwrap_or(latency.decode_base_ms);
        latency.decode_per_seq_ms = self.decode_per_seq_ms.unwrap_or(latency.decode_per_seq_ms);
        latency.context_per_ktoken_ms = self.context_per_ktoken_ms.unwrap_or(latency.context_per_ktoken_ms);
        latency.prefill_per_token_ms *= prefill_slowdown;
        latency.prefill_per_cached_token_ms *= prefill_slowdown;
        latency.jitter = self.jitter;
        latency.time_scale = self.time_scale;
        config.seed = self.seed;
        config.metrics_style = self.metrics_style;
        config.lora_enabled = self.enable_lora || !self.lora_adapters.is_empty();
        config.lora_adapters = self.lora_adapters.clone();
        config.max_loras = self.max_loras;
        config.role = self.role;
        config.kv_transfer_per_token_ms = self.kv_transfer_per_token_ms;
        config.lora_load_ms = self.lora_load_ms;
        config.responses_store = self.responses_store;
        config.prompt_tokens_details = self.enable_prompt_tokens_details;
        config.validate().map(|()| config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(arguments: &[&str]) -> Result<Vec<PodConfig>, String> {
        let cli = Cli::try_parse_from(std::iter::once("vllm-sim").chain(arguments.iter().copied()))
            .map_err(|error| error.to_string())?;
        cli.pod_configs()
    }

    #[test]
    fn ports_make_independent_pods_and_flags_override_the_preset() {
        let configs = parse(&["--ports", "8001,8002", "--decode-base-ms", "5", "--preset", "large"]).unwrap();
        assert_eq!(configs.iter().map(|config| config.port).collect::<Vec<_>>(), vec![8001, 8002]);
        assert_eq!(configs[0].latency.decode_base_ms, 5.0);
        assert_eq!(configs[0].latency.prefill_per_token_ms, Preset::Large.latency().prefill_per_token_ms);
        assert_eq!(parse(&[]).unwrap()[0].port, 8001);
    }

    #[test]
    fn a_prefill_slowdown_applies_per_port() {
        let base = Preset::Small.latency().prefill_per_token_ms;
        let configs = parse(&["--ports", "1,2", "--prefill-slowdown", "1,3"]).unwrap();
        assert_eq!(configs[0].latency.prefill_per_token_ms, base);
        assert!((configs[1].latency.prefill_per_token_ms - 3.0 * base).abs() < 1e-12);
        let all = parse(&["--ports", "1,2", "--prefill-slowdown", "2"]).unwrap();
        assert!(all.iter().all(|c| (c.latency.prefill_per_token_ms - 2.0 * base).abs() < 1e-12));
        assert!(parse(&["--ports", "1,2", "--prefill-slowdown", "1,2,3"]).is_err());
        assert!(parse(&["--prefill-slowdown", "0"]).is_err());
    }

    #[test]
    fn conflicting_or_invalid_flags_are_refused() {
        assert!(parse(&["--port", "1", "--ports", "2,3"]).is_err());
        assert!(parse(&["--time-scale", "-1"]).is_err());
        assert!(parse(&["--metrics-style", "nope"]).is_err());
        let styled = parse(&["--metrics-style", "vllm-legacy", "--lora-adapters", "a,b"]).unwrap();
        assert_eq!(styled[0].metrics_style, MetricsStyle::VllmLegacy);
        assert!(styled[0].lora_enabled);
        assert!(!styled[0].prompt_tokens_details, "off by default, as in vLLM");
        assert!(parse(&["--enable-prompt-tokens-details"]).unwrap()[0].prompt_tokens_details);
        // Given twice (the launcher's copy and a caller's): taken, as vLLM's argparse does.
        let twice = parse(&["--enable-prompt-tokens-details", "--enable-prompt-tokens-details"]).unwrap();
        assert!(twice[0].prompt_tokens_details);
    }
}
