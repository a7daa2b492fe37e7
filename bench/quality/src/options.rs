//! Command-line options of `wasm-epp-bench-quality`.

use std::path::PathBuf;

use clap::Parser;

use crate::replicas::targets::ReplicaTarget;
use crate::targets::TargetName;
use crate::workload::WorkloadName;

#[derive(Debug, Parser)]
#[command(
    name = "wasm-epp-bench-quality",
    about = "Routing quality of wasm-epp against Envoy round robin, Envoy least-request and vllm-router on the same simulated vLLM pool"
)]
pub struct Options {
    /// Smoke run: fewer requests per workload (about 4 minutes in all instead of about 11).
    #[arg(long)]
    pub quick: bool,
    /// Release every job of each workload at once (client slots = jobs), so `out tok/s` is the
    /// pool's output throughput at saturation. Use its own --out-dir.
    #[arg(long)]
    pub saturate: bool,
    /// Workloads to run: a (shared prefix), b (multi-turn), c (no prefix), d (burst). With
    /// --comparison-only, b unless this names others.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_WORKLOADS)]
    pub workloads: Vec<WorkloadName>,
    /// Targets to run, in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "wasm-epp,envoy-round-robin,envoy-least-request,vllm-router-cache-aware,vllm-router-power-of-two"
    )]
    pub targets: Vec<TargetName>,
    /// Folder for quality.json and quality.md (relative paths are from the workspace root).
    #[arg(long, default_value = "bench/results")]
    pub out_dir: PathBuf,
    /// The simulator's --time-scale (1 = the preset's real-GPU timings).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Each request gives up after this many seconds (counted as an error).
    #[arg(long, default_value_t = 120)]
    pub request_timeout_s: u64,
    /// Seed of every prompt and draw; the same seed replays the same requests.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// The vllm-router executable (default: $VLLM_ROUTER_BIN, else .venv-vllm-router/bin/vllm-router).
    #[arg(long)]
    pub vllm_router: Option<PathBuf>,
    /// Run only the replicas dimension (skip the targets above; quality.json is left as is).
    #[arg(long, conflicts_with = "no_replicas")]
    pub replicas_only: bool,
    /// Skip the replicas dimension.
    #[arg(long)]
    pub no_replicas: bool,
    /// Skip the replicas dimension's CPU cost of peering at a high decision rate.
    #[arg(long)]
    pub no_peer_cost: bool,
    /// Only measure the CPU cost of peering; the replicas table is kept from replicas.json.
    #[arg(long)]
    pub peer_cost_only: bool,
    /// Workloads of the replicas dimension (issue 12): e is the shared-prefix chat under pressure.
    #[arg(long, value_delimiter = ',', default_value = "a,b,e")]
    pub replica_workloads: Vec<WorkloadName>,
    /// Targets of the replicas dimension, in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "wasm-epp-x1,wasm-epp-x2,wasm-epp-x4,wasm-epp-x2-no-peering,wasm-epp-x4-no-peering,wasm-epp-x4-no-peering-prior,wasm-epp-x4-least-recent,envoy-round-robin"
    )]
    pub replica_targets: Vec<ReplicaTarget>,
    /// Run only workload j, the overload with flow control (issue 16); results go to
    /// `<out-dir>/flow-control.{json,md}`.
    #[arg(long)]
    pub flow_only: bool,
    /// Seconds of overload in workload j.
    #[arg(long, default_value_t = 60)]
    pub flow_seconds: u64,
    /// Offered load of workload j as a multiple of the measured capacity.
    #[arg(long, default_value_t = 2.0)]
    pub flow_load: f64,
    /// Targets of workload j, in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "wasm-epp-flow,wasm-epp-flow-no-reserve,wasm-epp,envoy-round-robin,envoy-least-request,vllm-router-cache-aware"
    )]
    pub flow_targets: Vec<crate::flow::FlowTarget>,
    /// wasm-epp's `flow_control.max_inflight_per_pod` in workload j (the pods run 8 sequences).
    #[arg(long, default_value_t = 8)]
    pub flow_max_inflight: usize,
    /// wasm-epp's `flow_control.reserved_per_pod` in workload j (places kept for critical).
    #[arg(long, default_value_t = 2)]
    pub flow_reserved: usize,
    /// Run only the prefill/decode dimension (issue 19): workload k and its short-prompt check,
    /// results in bench/results/pd/ (or --out-dir).
    #[arg(long, conflicts_with = "replicas_only")]
    pub pd_only: bool,
    /// Workloads of the P/D dimension to run, by label (k-long-prompts, k-long-prompts-busy,
    /// k-short-prompts); empty = all. For iterating: the report then covers only these.
    #[arg(long, value_delimiter = ',')]
    pub pd_workloads: Vec<String>,
    /// Targets of the P/D dimension to run, by label (wasm-epp-pd, wasm-epp, ...); empty = all.
    #[arg(long, value_delimiter = ',')]
    pub pd_targets: Vec<String>,
    /// Run only issue 14's rate ladder driven by inference-perf (installed by `make
    /// bench-inference-perf`); results in `<out-dir>/inference-perf.{json,md}`.
    #[arg(long, conflicts_with_all = ["replicas_only", "pd_only", "flow_only"])]
    pub inference_perf_only: bool,
    /// Targets of the inference-perf ladder, in this order.
    #[arg(long, value_delimiter = ',', default_value = crate::inference_perf::DEFAULT_TARGETS)]
    pub inference_perf_targets: Vec<TargetName>,
    /// Run only the gateway's own A/B test (`wasm-epp-compared`: half the pods to a
    /// least-request baseline arm) and, on the same workload, the full-pool references
    /// `wasm-epp` and `envoy-least-request`; results in `<out-dir>/comparison.{json,md}`
    /// (`bench/results/comparison/` by default). Workload b unless --workloads names others.
    #[arg(long, conflicts_with_all = ["replicas_only", "pd_only", "flow_only", "inference_perf_only", "peer_cost_only"])]
    pub comparison_only: bool,
    /// Run only the failing-pods dimension: one pod, then three of four, answering 500 to
    /// every inference request while their `/metrics` look idle, under wasm-epp with and
    /// without outlier detection and the peers; results in `<out-dir>/faults.{json,md}`
    /// (`bench/results/faults/` by default). Workload c unless --workloads names others.
    #[arg(long, conflicts_with_all = ["replicas_only", "pd_only", "flow_only", "inference_perf_only", "peer_cost_only", "comparison_only"])]
    pub faults_only: bool,
    /// Targets of the failing-pods dimension, in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "wasm-epp,wasm-epp-no-outliers,envoy-least-request,envoy-round-robin,vllm-router-power-of-two,vllm-router-cache-aware"
    )]
    pub faults_targets: Vec<TargetName>,
}

/// `--workloads`' default: the quality benchmark's four.
const DEFAULT_WORKLOADS: &str = "a,b,c,d";

impl Options {
    /// The workloads of `--comparison-only`: b (multi-turn chats, 8 pods, KV pressure) when
    /// `--workloads` is left at its default, else the ones it names.
    pub fn comparison_workloads(&self) -> Vec<WorkloadName> {
        self.workloads_or(WorkloadName::MultiTurn)
    }

    /// The workloads of `--faults-only`: c (unrelated prompts, 4 pods) when `--workloads` is
    /// left at its default, else the ones it names.
    pub fn faults_workloads(&self) -> Vec<WorkloadName> {
        self.workloads_or(WorkloadName::NoPrefix)
    }

    /// `default` alone when `--workloads` is left at its default, else the ones it names.
    fn workloads_or(&self, default: WorkloadName) -> Vec<WorkloadName> {
        let defaults =
            [WorkloadName::SharedPrefix, WorkloadName::MultiTurn, WorkloadName::NoPrefix, WorkloadName::Burst];
        if self.workloads == defaults {
            vec![default]
        } else {
            let mut names = self.workloads.clone();
            names.dedup();
            names
        }
    }
}
