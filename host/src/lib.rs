//! The one module family that calls `proxy_wasm::hostcalls`.
//!
//! Every call here returns the host's `Result` and is mapped to a value with context; the
//! SDK's trait helpers (which unwrap host results and would kill the VM on an error) are
//! not used. The filter and the singleton both build on this crate, so neither repeats it.

#![forbid(unsafe_code)]

pub mod clock;
pub mod stats;
pub mod store;

pub use clock::now_ms;
pub use stats::{Counter, Gauge, LabelledCounters};
pub use store::ProxyStore;
