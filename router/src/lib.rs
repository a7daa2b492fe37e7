//! The request path of one Envoy worker, in request order:
//!
//! 1. [`configure()`]: the plugin configuration is parsed and validated into a [`Worker`]
//!    (or refused with the reason: the plugin then fails to start, never on a request).
//! 2. [`stream::RequestStream`]: one per request. Headers: client destination headers
//!    removed, health probe and model list ([`model_list`]) answered, the request held; body: buffered (bounded per stream
//!    and per worker), parsed; then [`decision`] picks a pod and the destination header is
//!    written, or [`reply`] answers 400/404/429/503 itself ([`protocol`] reads the
//!    objective, session and subset headers; [`served`] reports the answering pod). At the end of the stream its
//!    in-flight count is released.
//! 3. [`tick`]: every `prefix.sync_interval_ms`, the worker refreshes its pod table, shares
//!    its decisions with the other workers and learns theirs, and flushes its stats.
//!
//! Every host call goes through [`wasm_epp_host::Host`]: in Envoy the `filter` crate passes
//! the real host; tests and benchmarks pass a `MockHost`.

#![forbid(unsafe_code)]

pub mod answer_encoding;
pub mod answer_headers;
pub mod answer_type;
pub mod attempts;
pub mod comparison_stats;
pub mod configure;
pub mod decision;
pub mod decision_header;
pub mod decision_stats;
pub mod destination;
pub mod disaggregate;
pub mod disowned;
pub mod flow;
pub mod histogram;
pub mod learning_share;
pub mod model_list;
pub mod outliers_share;
pub mod peer_receiver;
pub mod prefill_hold;
pub mod profile;
pub mod protocol;
pub mod reply;
pub mod response;
pub mod response_ids;
pub mod rewrite;
pub mod served;
pub mod stats;
pub mod stream;
pub mod stream_error;
pub mod table_cache;
pub mod tick;
pub mod worker;

pub use configure::{configure, ConfigureError};
pub use stream::{RequestStream, Step};
pub use worker::Worker;
