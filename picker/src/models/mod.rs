//! Which models each pod serves, and which pods a request for one model may go to.
//!
//! A pod serves one base model (vLLM's `--served-model-name`, read from the `model_name` label
//! of its metrics or from `/v1/models`) and any LoRA adapters it has registered (`/v1/models`
//! lists them with a `parent`; `vllm:lora_adapter_loaded{adapter_name}` names them with the `level` they sit
//! at; `vllm:lora_requests_info` names those running or waiting). [`residency`] reads the
//! metrics, [`catalog`] reads `/v1/models` (fetched on [`catalog_poll`]'s slower schedule;
//! [`catalog_failures`]: why a fetch gave nothing, told once per pod and kind),
//! [`index`] maps each name to the pods serving it (once per published table), [`affinity`]
//! ranks pods for an adapter (with [`demand`]: which adapters were asked for lately), and
//! [`rewrite`] maps a public model name onto weighted targets.

pub mod affinity;
pub mod catalog;
pub mod catalog_failures;
pub mod catalog_poll;
pub mod demand;
pub mod index;
pub mod listing;
pub mod name_list;
pub mod residency;
pub mod rewrite;

/// Names the pool service keeps in each of a pod's lists (models, adapters, running, waiting,
/// resident) unless `max_names_per_pod` says otherwise: vLLM holds a few dozen adapters in
/// memory (`--max-cpu-loras`), and a pod registering more is marked (`names_cut`).
pub const DEFAULT_NAMES_PER_POD: usize = 64;

/// The most `max_names_per_pod` may be, and what a worker keeps of a decoded table's lists
/// (the pool service bounded them already, at its configured value): a multi-tenant pod
/// registers hundreds of adapters, and each name costs every worker its decode and index
/// entry on every publish (docs/configuration.md, `max_names_per_pod`, has the figures).
pub const MAX_NAMES_PER_POD: usize = 1024;
