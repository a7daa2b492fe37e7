//! The ways of putting Envoy in front of the pods that the benchmarks compare: plain Envoy,
//! the header-only baseline filter in three degrees of body handling, and wasm-epp in the
//! shipped and in stripped-down configurations.

pub use crate::template_cut::Feature;

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
    /// As `WasmEppLearning`, reading every stream that asks for `usage` to its end
    /// (`learning.usage_streams_per_pod` and `usage_chunks_per_stream` at their maximum): the
    /// cost the two bounds save (`streams`). Named explicitly.
    WasmEppLearningReadAll,
    /// The body-reading filter (`HeaderRead`) rendered inside wasm-epp's own template instead of
    /// the baseline's (overload manager, header_mutation, retry policy, override_host cluster,
    /// stats tags, timeouts), without the singleton: what the shipped Envoy configuration costs
    /// apart from wasm-epp's Wasm.
    HeaderReadShippedConfig,
    /// As `HeaderReadShippedConfig`, plus wasm-epp's singleton polling the pods (same vm_id,
    /// shared data and scrapes as shipped): what the singleton's main-thread work costs the
    /// request path.
    HeaderReadShippedSingleton,
    /// As `HeaderReadShippedConfig` less one feature of the template: what that feature costs.
    HeaderReadShippedWithout(Feature),
    /// wasm-epp as shipped with its worker tick slowed from 20 ms to 1 s
    /// (`prefix.sync_interval_ms`): what the tick (table, in-flight sync, ring replay, stats
    /// flush) costs.
    WasmEppSlowTick,
    /// wasm-epp as shipped with the singleton polling every 1 s instead of 100 ms: what the
    /// scrapes and the main thread's batch handling cost the request path.
    WasmEppSlowPoll,
    /// wasm-epp as shipped, its filter built with the `profile` feature
    /// (`envoys::profile_filter_wasm`): the same code, timing its phases into counters. For the
    /// `profile` benchmark only.
    WasmEppProfiled,
    /// `WasmEppProfiled` with `learning.enabled`: beside it in the `profile` benchmark, what
    /// watching the answers (issue 14) adds to the response callbacks.
    WasmEppProfiledLearning,
    /// wasm-epp as shipped with the template's access log on (as `make run`, compose and the
    /// Kubernetes manifests run it): what a JSON line per request costs. Named explicitly.
    WasmEppAccessLog,
    /// wasm-epp as shipped serving its pool as the second of two pools behind one Envoy
    /// (docs/deployment.md, "Several pools behind one Envoy"): the requests take the second
    /// route (the first matches a header they lack), run this pool's filter and not the
    /// other's, and every stat carries `pool`; the other pool's singleton polls the same pods.
    /// What serving another pool beside it costs a pool's requests. Named explicitly.
    WasmEppTwoPools,
    /// wasm-epp as shipped with the live comparison on (`comparison.baseline_share` 0.5): half
    /// the pods and requests routed by the least-request baseline, every answer's status read
    /// and its end timed per arm. What running the A/B test costs. Named explicitly.
    WasmEppCompared,
    /// wasm-epp as shipped with outlier detection off (`outlier_detection.enabled` false): no
    /// `:status` or answering-pod lookup and no per-worker record on each answer. What the
    /// default-on outlier detection costs. Named explicitly.
    WasmEppNoOutliers,
}

impl Variant {
    /// The variants that split wasm-epp's cost outside its VM callbacks (issue 17, round
    /// three); named explicitly (`--variants`), not in the default runs.
    pub const BISECTION: [Variant; 13] = [
        Variant::HeaderReadShippedConfig,
        Variant::HeaderReadShippedSingleton,
        Variant::HeaderReadShippedWithout(Feature::Overload),
        Variant::HeaderReadShippedWithout(Feature::HeaderMutation),
        Variant::HeaderReadShippedWithout(Feature::Retries),
        Variant::HeaderReadShippedWithout(Feature::PreviousHosts),
        Variant::HeaderReadShippedWithout(Feature::ServedHeader),
        Variant::HeaderReadShippedWithout(Feature::StatsTags),
        Variant::HeaderReadShippedWithout(Feature::Timeouts),
        Variant::HeaderReadShippedWithout(Feature::RemoteAddress),
        Variant::HeaderReadShippedWithout(Feature::LocalReply),
        Variant::WasmEppSlowTick,
        Variant::WasmEppSlowPoll,
    ];

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
            Variant::WasmEppLearningReadAll => "wasm-epp-learning-read-all",
            Variant::HeaderReadShippedConfig => "header-read-shipped-config",
            Variant::HeaderReadShippedSingleton => "header-read-shipped-singleton",
            Variant::HeaderReadShippedWithout(feature) => match feature {
                Feature::Overload => "header-read-shipped-no-overload",
                Feature::HeaderMutation => "header-read-shipped-no-header-mutation",
                Feature::Retries => "header-read-shipped-no-retries",
                Feature::PreviousHosts => "header-read-shipped-no-previous-hosts",
                Feature::ServedHeader => "header-read-shipped-no-served-header",
                Feature::StatsTags => "header-read-shipped-no-stats-tags",
                Feature::Timeouts => "header-read-shipped-no-timeouts",
                Feature::RemoteAddress => "header-read-shipped-no-remote-address",
                Feature::LocalReply => "header-read-shipped-no-local-reply",
            },
            Variant::WasmEppSlowTick => "wasm-epp-slow-tick",
            Variant::WasmEppSlowPoll => "wasm-epp-slow-poll",
            Variant::WasmEppProfiled => "wasm-epp-profiled",
            Variant::WasmEppProfiledLearning => "wasm-epp-profiled-learning",
            Variant::WasmEppAccessLog => "wasm-epp-access-log",
            Variant::WasmEppTwoPools => "wasm-epp-two-pools",
            Variant::WasmEppCompared => "wasm-epp-compared",
            Variant::WasmEppNoOutliers => "wasm-epp-no-outliers",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .chain(Self::BISECTION)
            .chain([
                Variant::WasmEppLearning,
                Variant::WasmEppLearningReadAll,
                Variant::WasmEppProfiled,
                Variant::WasmEppProfiledLearning,
                Variant::WasmEppAccessLog,
                Variant::WasmEppTwoPools,
                Variant::WasmEppCompared,
                Variant::WasmEppNoOutliers,
            ])
            .find(|v| v.name() == name)
    }

    /// Built with the `profile` feature: its phases' timers are in its counters.
    pub fn is_profiled(self) -> bool {
        matches!(self, Variant::WasmEppProfiled | Variant::WasmEppProfiledLearning)
    }

    /// The client names the pod only for plain Envoy; every filter overwrites the header.
    pub(crate) fn client_names_pod(self) -> bool {
        self == Variant::Plain
    }

    pub(crate) fn header_filter_config(self) -> Option<&'static str> {
        match self {
            Variant::HeaderOnly => Some(""),
            Variant::HeaderBuffered => Some("buffer"),
            Variant::HeaderRead
            | Variant::HeaderReadShippedConfig
            | Variant::HeaderReadShippedSingleton
            | Variant::HeaderReadShippedWithout(_) => Some("buffer read"),
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
                | Variant::WasmEppLearningReadAll
                | Variant::WasmEppProfiled
                | Variant::WasmEppProfiledLearning
                | Variant::WasmEppSlowTick
                | Variant::WasmEppSlowPoll
                | Variant::WasmEppAccessLog
                | Variant::WasmEppTwoPools
                | Variant::WasmEppCompared
                | Variant::WasmEppNoOutliers
        )
    }

    /// The `pool` label of the benchmarked pool's stats (`pool_name`), where it has one.
    pub(crate) fn pool_label(self) -> Option<&'static str> {
        (self == Variant::WasmEppTwoPools).then_some(crate::envoys::BENCHED_POOL)
    }

    /// Rendered from the project's own template (`envoy/envoy.yaml.template`) by the
    /// launcher, whatever the filter module.
    pub(crate) fn uses_shipped_template(self) -> bool {
        self.is_wasm_epp()
            || matches!(
                self,
                Variant::HeaderReadShippedConfig
                    | Variant::HeaderReadShippedSingleton
                    | Variant::HeaderReadShippedWithout(_)
            )
    }

    /// The template feature this variant leaves out.
    pub(crate) fn left_out(self) -> Option<Feature> {
        match self {
            Variant::HeaderReadShippedWithout(feature) => Some(feature),
            _ => None,
        }
    }

    /// Runs wasm-epp's singleton, so its start waits until every pod is seen healthy.
    pub(crate) fn runs_singleton(self) -> bool {
        self.is_wasm_epp() || self == Variant::HeaderReadShippedSingleton
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_round_trip_by_name() {
        let named =
            [Variant::WasmEppAccessLog, Variant::WasmEppTwoPools, Variant::WasmEppCompared, Variant::WasmEppNoOutliers];
        for variant in Variant::ALL.into_iter().chain(Variant::BISECTION).chain(named) {
            assert_eq!(Variant::from_name(variant.name()), Some(variant));
        }
    }
}
