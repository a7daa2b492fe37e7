//! What wasm-epp costs, measured against what it replaces.
//!
//! Two halves. The criterion bench (`benches/decision/`) times the shipped request path
//! (`wasm_epp_router` on a `MockHost`, state from [`native`]) natively: the decision, and a
//! whole request from headers to `on_log`, with their allocations. The
//! binary (`wasm-epp-bench-cost`) runs the real Envoy: the same requests, interleaved, through
//! plain Envoy, Envoy with a header-only Wasm filter and Envoy with wasm-epp, against pods
//! that answer at once ([`upstream`]), so every difference is Envoy-side work. It measures
//! added latency and CPU ([`latency`]) and with streamed answers ([`streams`]), throughput ([`throughput`]), the singleton's scrape
//! cost ([`scrape`]) and memory while distinct prefixes are routed ([`memory`]), which Wasm
//! runtimes the Envoy build runs ([`runtimes`]) and the decision's cost by pool, body and
//! endpoint ([`matrix`]), writes every figure into `bench/results/cost.json` ([`results`]),
//! and judges issue 17's goals on them ([`goals`]).

#![deny(unsafe_code)]

pub mod client;
pub mod envoys;
pub mod goals;
pub mod latency;
pub mod matrix;
pub mod memory;
pub mod metrics_page;
pub mod native;
pub mod profile;
pub mod results;
pub mod runtimes;
pub mod sampling;
pub mod scrape;
pub mod streams;
pub mod template_cut;
pub mod throughput;
pub mod upstream;
pub mod variant;
pub mod workload;
