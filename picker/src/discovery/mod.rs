//! Kubernetes discovery for the singleton: which pods are the pool right now.
//!
//! The pool is the Ready, non-terminating pods with an IP that match a label selector in
//! one namespace, or the selector and port of an InferencePool. The singleton LISTs them
//! from the API server with `dispatch_http_call` on every relist tick; everything that
//! decides (parsing, pagination, resourceVersion, failure bookkeeping) is here in plain
//! Rust, so the glue in `shared-state` only sends what [`PoolDiscovery`] asks for and
//! hands back what came.
//!
//! Read in order: [`config`] (what is configured), [`query`] (what is asked),
//! [`inference_pool`] and [`pod_list`] (what comes back), [`lister`] (the cycle),
//! [`health`] (what is logged and counted).

pub mod config;
pub mod health;
pub mod inference_pool;
pub mod lister;
pub mod pod_list;
pub mod query;

pub use config::{InferencePoolApi, KubernetesConfig, PoolSource};
pub use health::{DiscoveryError, HealthChange};
pub use lister::{ApiRequest, ApiResponse, PoolDiscovery, Progress};
