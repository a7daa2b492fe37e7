//! Which models each pod serves, and which pods a request for one model may go to.
//!
//! A pod serves one base model (vLLM's `--served-model-name`, read from the `model_name` label
//! of its metrics or from `/v1/models`) and any LoRA adapters it has registered (`/v1/models`
//! lists them with a `parent`; `vllm:lora_adapter_loaded{adapter_name}` names them with the `level` they sit
//! at; `vllm:lora_requests_info` names those running or waiting). [`residency`] reads the
//! metrics, [`catalog`] reads `/v1/models` (fetched on [`catalog_poll`]'s slower schedule;
//! [`catalog_failures`]: why a fetch gave nothing, told once per pod and kind),
//! [`index`] maps each name to the pods serving it (once per published table), [`affinity`]
//! ranks pods for an adapter (with [`demand`]: which adapters were asked for lately), and
//! [`rewrite`] maps a public model name onto weighted targets.

pub mod affinity;
pub mod catalog;
pub mod catalog_failures;
pub mod catalog_poll;
pub mod demand;
pub mod index;
pub mod listing;
pub mod residency;
pub mod rewrite;

/// Model names kept per pod: one base model and `MAX_ADAPTERS_PER_LIST` adapters cover a real
/// pod (vLLM's `--max-cpu-loras` is a few dozen); a longer list is a pod flooding the table.
pub const MAX_MODELS_PER_POD: usize = crate::metrics_text::MAX_ADAPTERS_PER_LIST;

/// Keeps `name` in `list` if it is new, short enough and the list has room; `false` when a
/// name was dropped (too long, or the list full): the pod serves a name its list lacks.
pub(crate) fn push_bounded(list: &mut Vec<String>, name: &str) -> bool {
    if name.is_empty() || list.iter().any(|known| known == name) {
        return true;
    }
    let fits = name.len() <= crate::metrics_text::MAX_ADAPTER_NAME_BYTES && list.len() < MAX_MODELS_PER_POD;
    if fits {
        list.push(name.to_owned());
    }
    fits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_stay_bounded() {
        let mut list = Vec::new();
        let kept = (0..1000).filter(|i| push_bounded(&mut list, &format!("m{i}"))).count();
        assert!(push_bounded(&mut list, "m0"), "a name kept already is no drop");
        assert_eq!(list.len(), MAX_MODELS_PER_POD);
        assert_eq!(kept, MAX_MODELS_PER_POD, "every name past the bound is reported dropped");
        let long = "x".repeat(crate::metrics_text::MAX_ADAPTER_NAME_BYTES + 1);
        assert!(!push_bounded(&mut Vec::new(), &long));
    }
}
