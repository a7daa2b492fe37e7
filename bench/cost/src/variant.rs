//! The ways of putting Envoy in front of the pods that the benchmarks compare: plain Envoy,
//! the header-only baseline filter in three degrees of body handling, and wasm-epp in the
//! shipped and in stripped-down configurations.

/// One way of putting Envoy in front of the pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// (a) No filter; the client names the pod; ORIGINAL_DST cluster.
    Plain,
    /// (b0) Header-only Wasm filter writing the header in `on_http_request_headers`.
    HeaderOnly,
    /// (b) Header-only filter that holds headers and buffers the body to end of stream first.
    HeaderBuffered,
    /// (b+read) As `HeaderBuffered`, plus copying the whole body into the VM.
    HeaderRead,
    /// (c) wasm-epp, filter + singleton, ORIGINAL_DST cluster (as plain Envoy).
    WasmEppOriginalDst,
    /// (c') wasm-epp as shipped: override_host cluster, two fallback destinations.
    WasmEpp,
    /// wasm-epp as shipped but with prefix affinity off: what hashing, the index and its
    /// cross-worker sync cost.
    WasmEppNoPrefix,
    /// wasm-epp as shipped with `learning.enabled` (issue 14): what watching each answer
    /// (first byte, status, usage scan) and the token accounting cost. Named explicitly
    /// (`--variants wasm-epp,wasm-epp-learning`); not in the default runs.
    WasmEppLearning,
    /// wasm-epp as shipped, its filter built with the `profile` feature
    /// (`envoys::profile_filter_wasm`): the same code, timing its phases into counters. For the
    /// `profile` benchmark only.
    WasmEppProfiled,
}

impl Variant {
    /// Every variant, in the order reports list them.
    pub const ALL: [Variant; 7] = [
        Variant::Plain,
        Variant::HeaderOnly,
        Variant::HeaderBuffered,
        Variant::HeaderRead,
        Variant::WasmEppOriginalDst,
        Variant::WasmEpp,
        Variant::WasmEppNoPrefix,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::HeaderOnly => "header-only",
            Variant::HeaderBuffered => "header-buffered",
            Variant::HeaderRead => "header-buffered-read",
            Variant::WasmEppOriginalDst => "wasm-epp-odst",
            Variant::WasmEpp => "wasm-epp",
            Variant::WasmEppNoPrefix => "wasm-epp-noprefix",
            Variant::WasmEppLearning => "wasm-epp-learning",
            Variant::WasmEppProfiled => "wasm-epp-profiled",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().chain([Variant::WasmEppLearning, Variant::WasmEppProfiled]).find(|v| v.name() == name)
    }

    /// The client names the pod only for plain Envoy; every filter overwrites the header.
    pub(crate) fn client_names_pod(self) -> bool {
        self == Variant::Plain
    }

    pub(crate) fn header_filter_config(self) -> Option<&'static str> {
        match self {
            Variant::HeaderOnly => Some(""),
            Variant::HeaderBuffered => Some("buffer"),
            Variant::HeaderRead => Some("buffer read"),
            _ => None,
        }
    }

    /// wasm-epp itself, in either cluster mode.
    pub fn is_wasm_epp(self) -> bool {
        matches!(
            self,
            Variant::WasmEpp
                | Variant::WasmEppOriginalDst
                | Variant::WasmEppNoPrefix
                | Variant::WasmEppLearning
                | Variant::WasmEppProfiled
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_round_trip_by_name() {
        for variant in Variant::ALL {
            assert_eq!(Variant::from_name(variant.name()), Some(variant));
        }
    }
}
