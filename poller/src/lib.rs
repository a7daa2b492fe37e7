//! The pool service: what wasm-epp's singleton does, as a component any root context can run.
//!
//! [`service::PoolService`] ticks, discovers the pool ([`discovery`], Kubernetes) or takes it
//! from configuration, dispatches a scrape of `/metrics` to each pod through an ORIGINAL_DST
//! cluster, hands answers to `picker::poller::PoolPoller`, publishes the pod table when a
//! round completes ([`publish`]), fetches each pod's `/v1/models` less often (`catalogs`), relays the workers' prefix decisions into the ring
//! ([`relay`]), shares them with other gateway replicas ([`peers`]) and writes a heartbeat. The singleton (`shared-state/`) runs it on Envoy's
//! main thread; where no singleton can be installed, the filter's root contexts elect one
//! of themselves to run it ([`election`]). Every host call goes through
//! `wasm_epp_host::Host`, so all of it runs natively in tests.

#![forbid(unsafe_code)]

mod catalogs;
mod clock_skew;
pub mod discovery;
pub mod election;
pub mod peers;
pub mod pod_api_key;
pub mod pod_gauges;
mod publish;
mod relay;
pub mod service;

pub use election::ElectedPoller;
pub use service::PoolService;
