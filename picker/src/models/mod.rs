//! Which models each pod serves, and which pods a request for one model may go to.
//!
//! A pod serves one base model (vLLM's `--served-model-name`, read from the `model_name` label
//! of its metrics or from `/v1/models`) and any LoRA adapters it has registered (`/v1/models`
//! lists them with a `parent`; `vllm:lora_adapter_loaded` names them with the `level` they sit
//! at; `vllm:lora_requests_info` names those running or waiting). [`residency`] reads the
//! metrics, [`catalog`] reads `/v1/models` (fetched on [`catalog_poll`]'s slower schedule), [`affinity`] ranks pods for an adapter, and
//! [`rewrite`] maps a public model name onto weighted targets.

pub mod affinity;
pub mod catalog;
pub mod catalog_poll;
pub mod residency;
pub mod rewrite;

use crate::pod_table::PodState;

/// Model names kept per pod: one base model and `MAX_ADAPTERS_PER_LIST` adapters cover a real
/// pod (vLLM's `--max-cpu-loras` is a few dozen); a longer list is a pod flooding the table.
pub const MAX_MODELS_PER_POD: usize = crate::metrics_text::MAX_ADAPTERS_PER_LIST;

/// What the pool says about one request's model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serving {
    /// The pod lists the model (base or adapter).
    Yes,
    /// The pod lists models, and not this one.
    No,
    /// The pod has not told which models it serves (an engine without the labels).
    Unknown,
}

/// Whether `pod` serves `model`.
pub fn serves(pod: &PodState, model: &str) -> Serving {
    let lists = [&pod.models, &pod.adapters, &pod.running_loras, &pod.waiting_loras];
    if lists.iter().any(|list| list.iter().any(|name| name == model)) {
        Serving::Yes
    } else if lists.iter().all(|list| list.is_empty()) {
        Serving::Unknown
    } else {
        Serving::No
    }
}

/// Whether `model` names a LoRA adapter on `pod` (not its base model).
pub fn is_adapter(pod: &PodState, model: &str) -> bool {
    !pod.models.iter().any(|name| name == model)
        && [&pod.adapters, &pod.running_loras, &pod.waiting_loras].iter().any(|l| l.iter().any(|n| n == model))
}

/// Keeps `name` in `list` if it is new, short enough and the list has room.
pub(crate) fn push_bounded(list: &mut Vec<String>, name: &str) {
    let fits = !name.is_empty() && name.len() <= crate::metrics_text::MAX_ADAPTER_NAME_BYTES;
    if fits && list.len() < MAX_MODELS_PER_POD && !list.iter().any(|known| known == name) {
        list.push(name.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::PodAddress;

    fn pod(models: &[&str], adapters: &[&str]) -> PodState {
        let mut pod = PodState::unknown(&PodAddress::parse("10.0.0.1:80").unwrap());
        pod.models = models.iter().map(|m| m.to_string()).collect();
        pod.adapters = adapters.iter().map(|m| m.to_string()).collect();
        pod
    }

    #[test]
    fn a_pod_serves_its_base_and_adapters_and_nothing_else() {
        let p = pod(&["base"], &["a"]);
        assert_eq!(serves(&p, "base"), Serving::Yes);
        assert_eq!(serves(&p, "a"), Serving::Yes);
        assert_eq!(serves(&p, "other"), Serving::No);
        assert_eq!(serves(&pod(&[], &[]), "other"), Serving::Unknown);
        assert!(is_adapter(&p, "a") && !is_adapter(&p, "base"));
    }

    #[test]
    fn lists_stay_bounded() {
        let mut list = Vec::new();
        for i in 0..1000 {
            push_bounded(&mut list, &format!("m{i}"));
        }
        push_bounded(&mut list, "m0");
        assert_eq!(list.len(), MAX_MODELS_PER_POD);
    }
}
