//! wasm-epp's routing logic, in plain Rust.
//!
//! Everything the Envoy plugin decides is decided here, with no proxy-wasm dependency, so
//! it is unit-tested and benchmarked natively. The request path reads top to bottom:
//! [`request`] parses the body, [`pod_table`] and [`inflight`] say what each pod carries,
//! [`prefix`] hashes the prompt into blocks and says which pods probably cache them,
//! [`scheduler`] picks. The singleton's side: [`metrics_text`] reads scrapes, [`poller`]
//! turns them into the [`pod_table`]. [`store`] is the one seam to Envoy's shared data.

#![forbid(unsafe_code)]

pub mod address;
pub mod clock;
pub mod comparison;
pub mod config;
pub mod departed;
pub mod disaggregation;
pub mod discovery;
pub mod flow_share;
pub mod go_duration;
pub mod inflight;
pub mod keys;
pub mod learn;
pub mod lease;
pub mod metrics_text;
pub mod models;
pub mod outliers;
pub mod peer;
pub mod pod_table;
pub mod poller;
pub mod prefix;
mod prometheus_line;
pub mod random;
pub mod request;
pub mod response_id;
pub mod role;
pub mod route;
pub mod saturation;
pub mod scheduler;
pub mod store;
pub mod vm_id;
mod wire;
