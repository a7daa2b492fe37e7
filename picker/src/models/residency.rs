//! Models and adapters as a pod's `/metrics` names them.
//!
//! - the base model: the `model_name` label vLLM (and SGLang) put on every load metric;
//! - registered adapters: `vllm:lora_adapter_loaded{adapter_name, level, pinned}`, one series per
//!   adapter, `level="gpu"` when it is resident on the GPU and `"cpu"` when only held in CPU
//!   memory. No vLLM release has it yet: it is the upstream proposal (vllm-project/vllm PRs
//!   45411 and 54830), which llm-d-router's residency scorer reads too; the simulator writes it;
//! - GPU slots: `vllm:max_gpu_lora_adapters` (the same proposal, as llm-d-router#2792 reads it)
//!   or `max_lora` of `vllm:lora_requests_info` (every vLLM release).

use super::name_list::NameList;
use crate::prometheus_line::Sample;

/// Metric names read here, beside the load metrics (added to the scrape filter).
pub const RESIDENCY_METRICS: [&str; 2] = ["vllm:lora_adapter_loaded", "vllm:max_gpu_lora_adapters"];

/// What one scrape says about the models a pod serves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScrapedModels {
    /// Base model names (`model_name` labels), bounded.
    pub base: Vec<String>,
    /// Every adapter named by `vllm:lora_adapter_loaded`, bounded.
    pub adapters: Vec<String>,
    /// Those with `level="gpu"`.
    pub resident: Vec<String>,
    /// `vllm:max_gpu_lora_adapters`, when reported.
    pub max_gpu_loras: Option<u32>,
    /// A name was dropped (over-long, or past the bound): the pod serves more than listed.
    pub cut: bool,
}

/// [`ScrapedModels`] as a scrape is read, each list at most `max_names_per_pod` long.
pub struct ScrapedNames {
    base: NameList,
    adapters: NameList,
    resident: NameList,
    max_gpu_loras: Option<u32>,
    cut: bool,
}

impl ScrapedNames {
    pub fn new(max_names: usize) -> Self {
        let list = || NameList::new(max_names);
        Self { base: list(), adapters: list(), resident: list(), max_gpu_loras: None, cut: false }
    }

    pub fn finish(self) -> ScrapedModels {
        ScrapedModels {
            base: self.base.into_names(),
            adapters: self.adapters.into_names(),
            resident: self.resident.into_names(),
            max_gpu_loras: self.max_gpu_loras,
            cut: self.cut,
        }
    }
}

/// Longest slot count believed (GPUs hold a few dozen adapters at most).
const MAX_GPU_LORAS: f64 = 4096.0;

/// Reads one sample if it names a model or an adapter; `true` if it was a residency metric.
pub fn apply(sample: &Sample<'_>, models: &mut ScrapedNames) -> bool {
    match sample.name {
        "vllm:lora_adapter_loaded" => {
            // `lora_name` is what simulator builds before the proposal's names wrote; one more
            // label lookup keeps a pool of old and new builds readable during an upgrade.
            if let Some(name) = sample.label_text("adapter_name").or_else(|| sample.label_text("lora_name")) {
                if sample.value > 0.0 {
                    models.cut |= !models.adapters.push(&name);
                    if sample.label("level") == Some("gpu") {
                        models.cut |= !models.resident.push(&name);
                    }
                }
            }
            true
        }
        "vllm:max_gpu_lora_adapters" => {
            if sample.value.is_finite() && (0.0..=MAX_GPU_LORAS).contains(&sample.value) {
                models.max_gpu_loras = Some(sample.value as u32);
            }
            true
        }
        _ => {
            if let Some(name) = sample.label_text("model_name") {
                models.cut |= !models.base.push(&name);
            }
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::metrics_text::parse_engine_metrics;

    const NAMES: usize = crate::models::DEFAULT_NAMES_PER_POD;

    #[test]
    fn base_model_adapters_and_slots_come_from_the_scrape() {
        let text = "vllm:num_requests_running{model_name=\"base\"} 1\n\
            vllm:lora_adapter_loaded{engine=\"0\",adapter_name=\"a\",level=\"gpu\",pinned=\"false\"} 1\n\
            vllm:lora_adapter_loaded{engine=\"0\",adapter_name=\"b\",level=\"cpu\",pinned=\"false\"} 1\n\
            vllm:num_gpu_loaded_lora_adapters{engine=\"0\"} 1\n\
            vllm:max_gpu_lora_adapters{model_name=\"base\"} 2\n";
        let models = parse_engine_metrics(text, NAMES).unwrap().models;
        assert_eq!(models.base, ["base"]);
        assert_eq!(models.adapters, ["a", "b"]);
        assert_eq!(models.resident, ["a"]);
        assert_eq!(models.max_gpu_loras, Some(2));
    }

    #[test]
    fn names_are_read_as_the_pod_wrote_them_not_as_escaped_on_the_page() {
        // The text format escapes `\`, `"` and line feeds in label values; a name kept escaped
        // matched no request naming the model (the gateway answered 404 for a served model when
        // `/v1/models` was not polled) nor the adapter it is.
        let text = "vllm:num_requests_running{model_name=\"org\\\"q\\\" model\"} 1\n\
            vllm:lora_adapter_loaded{adapter_name=\"C:\\\\t\",level=\"gpu\"} 1\n\
            vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"a\\nb,c\",waiting_lora_adapters=\"\"} 1\n";
        let metrics = parse_engine_metrics(text, NAMES).unwrap();
        assert_eq!(metrics.models.base, ["org\"q\" model"]);
        assert_eq!((metrics.models.adapters.as_slice(), metrics.models.resident.len()), (&["C:\\t".to_owned()][..], 1));
        assert_eq!(metrics.lora.unwrap().running, ["a\nb", "c"]);
    }

    #[test]
    fn older_simulator_builds_name_adapters_with_lora_name() {
        let text = "vllm:num_requests_running{model_name=\"base\"} 1\n\
            vllm:lora_adapter_loaded{model_name=\"base\",lora_name=\"a\",level=\"gpu\"} 1\n";
        let models = parse_engine_metrics(text, NAMES).unwrap().models;
        assert_eq!(
            (models.adapters.as_slice(), models.resident.as_slice()),
            (&["a".to_owned()][..], &["a".to_owned()][..])
        );
    }

    #[test]
    fn registered_and_resident_adapters_keep_the_configured_number_of_names() {
        let page = |adapters: usize| {
            let mut text = String::from("vllm:num_requests_running{model_name=\"base\"} 1\n");
            for i in 0..adapters {
                let level = if i % 2 == 0 { "gpu" } else { "cpu" };
                text += &format!("vllm:lora_adapter_loaded{{adapter_name=\"t-{i}\",level=\"{level}\"}} 1\n");
            }
            text
        };
        let models = parse_engine_metrics(&page(256), 256).unwrap().models;
        assert_eq!((models.adapters.len(), models.resident.len(), models.cut), (256, 128, false), "all kept");
        let models = parse_engine_metrics(&page(600), 256).unwrap().models;
        assert_eq!((models.adapters.len(), models.resident.len()), (256, 256));
        assert_eq!(models.adapters.last().map(String::as_str), Some("t-255"), "the first ones, in page order");
        assert!(models.cut, "the pod registers more than is kept");
        let models = parse_engine_metrics(&page(100), NAMES).unwrap().models;
        assert_eq!((models.adapters.len(), models.cut), (NAMES, true), "the default bound");
    }
}
