//! The P/D lines of `/metrics`: the pod's role as an info gauge and the sidecar's counters,
//! under the simulator's own `vllm_sim:` prefix (vLLM has no such series).

use super::{PdCounters, PodRole};
use crate::metrics::prom_writer::PromWriter;

/// Renders the role gauge and the counters.
pub fn render(role: PodRole, counters: &PdCounters, created_unix: f64) -> String {
    let mut writer = PromWriter::new();
    writer.gauge("vllm_sim:pd_role_info", "The pod's role in a prefill/decode pool.", &[("role", role.name())], 1.0);
    let counters = [
        ("vllm_sim:pd_remote_prefills", "Requests prefilled by the prefill pod they named.", counters.remote_prefills),
        (
            "vllm_sim:pd_prefill_fallbacks",
            "Requests whose prefill pod failed, prefilled here.",
            counters.prefill_fallbacks,
        ),
        (
            "vllm_sim:pd_transferred_tokens",
            "Prompt tokens whose KV came from a prefill pod.",
            counters.transferred_tokens,
        ),
    ];
    for (name, help, value) in counters {
        writer.counter(name, help, &[], value as f64, created_unix);
    }
    writer.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_and_counters_are_labelled_series() {
        let counters =
            PdCounters { remote_prefills: 3, prefill_fallbacks: 1, transferred_tokens: 4096, ..PdCounters::default() };
        let text = render(PodRole::Decode, &counters, 0.0);
        assert!(text.contains("vllm_sim:pd_role_info{role=\"decode\"} 1.0"), "{text}");
        assert!(text.contains("vllm_sim:pd_prefill_fallbacks_total 1.0"), "{text}");
        assert!(text.contains("vllm_sim:pd_transferred_tokens_total 4096.0"), "{text}");
    }
}
