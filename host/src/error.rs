//! What a host call answered when it did not succeed.

use std::fmt;

/// A host call that returned a status other than success. Never a panic: the caller decides
/// (usually: count it, log it, fall back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostError {
    /// The ABI call, e.g. `get_shared_data`.
    pub call: &'static str,
    /// The proxy-wasm status code (1 not found, 2 bad argument, 8 CAS mismatch, 10 internal failure...).
    pub status: u32,
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host call {} failed with status {}", self.call, self.status)
    }
}

impl std::error::Error for HostError {}

pub type HostResult<T> = Result<T, HostError>;
