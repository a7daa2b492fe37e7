//! The fixed set of shared-data keys, versioned.
//!
//! Envoy's shared data has no delete: every key ever written stays until the VM id goes
//! away. So the key set is a short, fixed list, never a key per request, pod or prefix.
//! The `v1` in every key lets a future layout live beside this one during an upgrade.

/// The pod table published by the singleton (see [`crate::pod_table`]).
pub const POD_TABLE: &str = "wasm-epp/v1/pod-table";
/// A tiny key holding the pod table's version, read per request before the large table.
pub const POD_TABLE_VERSION: &str = "wasm-epp/v1/pod-table-version";
/// Requests in flight per pod, summed over every worker (see [`crate::inflight`]).
pub const INFLIGHT: &str = "wasm-epp/v1/inflight";
