//! The seam between wasm-epp and its host: every Proxy-Wasm call goes through [`Host`].
//!
//! [`proxy::ProxyHost`] implements it over the raw ABI ([`abi`], the only module that talks to
//! Envoy, and the only `unsafe` code in the project); [`mock::MockHost`] implements it in
//! memory with the host's real semantics (shared-data CAS, queues, local replies recorded),
//! so the request path and the pool service run natively in tests and benchmarks.
//!
//! No call here can panic: the SDK's `hostcalls` wrappers `panic!` on statuses they did not
//! expect and unwrap UTF-8 in header values, so they are not used (see [`abi`]). Header
//! values stay bytes ([`HeaderMap`]).

#![deny(unsafe_code)]

pub mod abi;
pub mod error;
pub mod headers;
pub mod metrics;
pub mod mock;
pub mod proxy;
pub mod tally;
pub mod warnings;

pub use error::{HostError, HostResult};
pub use headers::HeaderMap;
pub use metrics::{Counter, Gauge, Metrics};
pub use mock::MockHost;
pub use picker::store::{SharedStore, StoreError, Versioned};
pub use proxy::ProxyHost;
pub use tally::{CallCount, HostCallTally};

/// Kinds of Envoy stat a plugin can define.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
}

/// Everything wasm-epp asks of its host. Stream calls act on the HTTP stream whose callback
/// is running; call-response calls on the outgoing call whose answer is being delivered.
pub trait Host: SharedStore {
    /// Wall clock in ms since the epoch; 0 if the host cannot tell (read as "long ago").
    fn now_ms(&self) -> u64;
    /// The same clock in µs, to time a decision (hosts that only know ms report ms x 1000).
    fn now_us(&self) -> u64 {
        self.now_ms().saturating_mul(1_000)
    }
    /// The same clock in ns, to time phases of a few µs (hosts that know less pad with zeros).
    fn now_ns(&self) -> u64 {
        self.now_us().saturating_mul(1_000)
    }
    /// A value that differs between VMs and starts, to seed tie-breaking and keyed hashing.
    fn random_seed(&self) -> u64;
    fn set_tick_period_ms(&self, period_ms: u64) -> HostResult<()>;
    /// The plugin's configuration bytes (`size` as the host announced it).
    fn plugin_configuration(&self, size: usize) -> HostResult<Vec<u8>>;
    /// The VM id this plugin runs under, if the host says.
    fn vm_id(&self) -> Option<String>;
    /// A variable of the VM's environment, if set: Envoy gives a VM only those its
    /// `vm_config.environment_variables` names (`host_env_keys`, copied from Envoy's own
    /// environment, and `key_values`), through WASI's `environ_get`. Read at configuration
    /// (secrets kept out of the plugin's JSON, which Envoy's config_dump shows).
    fn env_var(&self, name: &str) -> Option<String>;

    /// The current request's headers, as bytes.
    fn request_headers(&self) -> HostResult<HeaderMap>;
    fn set_request_header(&self, name: &str, value: &[u8]) -> HostResult<()>;
    fn remove_request_header(&self, name: &str) -> HostResult<()>;
    /// Bytes `start..start + size` of the buffered request body.
    fn request_body(&self, start: usize, size: usize) -> HostResult<Vec<u8>>;
    /// Replaces the buffered request body (`replaced` bytes of it, i.e. all it held) with `body`.
    fn set_request_body(&self, replaced: usize, body: &[u8]) -> HostResult<()>;
    /// The current response's headers (from the response-headers callback on), as bytes.
    fn response_headers(&self) -> HostResult<HeaderMap>;
    /// One response header's value (`None` if absent): one lookup, not a copy of the map.
    fn response_header_value(&self, name: &str) -> HostResult<Option<Vec<u8>>>;
    fn set_response_header(&self, name: &str, value: &[u8]) -> HostResult<()>;
    fn remove_response_header(&self, name: &str) -> HostResult<()>;
    /// Bytes `start..start + size` of the response body chunk being delivered (not buffered:
    /// the filter reads each chunk as it passes).
    fn response_body(&self, start: usize, size: usize) -> HostResult<Vec<u8>>;
    /// An Envoy attribute by path segments (`["upstream", "address"]`); `None` if absent.
    fn property(&self, path: &[&str]) -> HostResult<Option<Vec<u8>>>;
    /// Resumes the request stream of the context `context_id` that was paused (called from
    /// the root context, e.g. on a tick, to release a held request).
    fn resume_request(&self, context_id: u32) -> HostResult<()>;
    /// Makes later stream calls of this callback (headers, local reply) act on the stream
    /// of `context_id`, e.g. from the root context's tick on a held request. Fails if that
    /// context is gone (its client disconnected).
    fn set_effective_context(&self, context_id: u32) -> HostResult<()>;
    /// Answers the current request locally; the caller then pauses the stream.
    fn send_reply(&self, status: u32, headers: &[(&str, &str)], body: &[u8]) -> HostResult<()>;

    fn register_queue(&self, name: &str) -> HostResult<u32>;
    /// `Ok(None)` until the queue's owner has registered it.
    fn resolve_queue(&self, vm_id: &str, name: &str) -> HostResult<Option<u32>>;
    fn enqueue(&self, queue: u32, message: &[u8]) -> HostResult<()>;
    fn dequeue(&self, queue: u32) -> HostResult<Option<Vec<u8>>>;

    /// Sends a request to `cluster` (`body` may be empty); the answer arrives with the
    /// returned token.
    fn dispatch_call(&self, cluster: &str, headers: &[(&str, &str)], body: &[u8], timeout_ms: u64) -> HostResult<u32>;
    /// The answered call's `:status`, if it has one (none: the call failed or timed out).
    fn call_response_status(&self) -> Option<u16>;
    /// A header of the answered call's response.
    fn call_response_header(&self, name: &str) -> Option<Vec<u8>>;
    /// The answered call's body, at most `max` bytes.
    fn call_response_body(&self, size: usize, max: usize) -> HostResult<Vec<u8>>;

    fn define_metric(&self, kind: MetricKind, name: &str) -> HostResult<u32>;
    fn increment_metric(&self, id: u32, by: u64) -> HostResult<()>;
    fn record_metric(&self, id: u32, value: u64) -> HostResult<()>;
}
