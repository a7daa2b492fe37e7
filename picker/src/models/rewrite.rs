//! Model rewrites: a public model name sent as one of several target models, by weight (the
//! Inference Extension's InferenceModelRewrite; a canary rollout of a new adapter).

use serde::Deserialize;

/// Rewrite rules at most; each is looked up per request by a linear scan.
pub const MAX_REWRITES: usize = 256;
/// Targets per rule at most (a canary is two; an A/B/n test a handful).
pub const MAX_TARGETS: usize = 16;

/// One public name and where its requests go.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRewrite {
    /// The `model` clients send.
    pub model: String,
    /// Models it is rewritten to, with relative weights.
    pub targets: Vec<WeightedTarget>,
}

/// A target model and its share.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedTarget {
    pub model: String,
    /// Relative weight (0 = receives nothing); the shares are weight over the rule's total.
    pub weight: u32,
}

impl ModelRewrite {
    /// Checks the rule: a name, 1..=MAX_TARGETS targets, a total weight in 1..=u32::MAX (the
    /// draw is a `usize`, 32 bits in Wasm: a larger total would never reach the last targets).
    pub fn validate(&self) -> Result<(), String> {
        if self.model.is_empty() || self.targets.is_empty() || self.targets.len() > MAX_TARGETS {
            return Err(format!("rewrite '{}' needs a model name and 1..={MAX_TARGETS} targets", self.model));
        }
        if self.targets.iter().any(|t| t.model.is_empty()) || self.total_weight() == 0 {
            return Err(format!("rewrite '{}': targets need names and a total weight above 0", self.model));
        }
        if self.total_weight() > u64::from(u32::MAX) {
            return Err(format!("rewrite '{}': the targets' weights add up past {}", self.model, u32::MAX));
        }
        Ok(())
    }

    fn total_weight(&self) -> u64 {
        self.targets.iter().map(|t| u64::from(t.weight)).sum()
    }

    /// The target for a uniform draw (`draw(total)` returns a value in `0..total`).
    pub fn target(&self, draw: impl FnOnce(usize) -> usize) -> Option<&str> {
        let total = self.total_weight();
        let mut point = draw(total as usize) as u64;
        for target in &self.targets {
            if point < u64::from(target.weight) {
                return Some(&target.model);
            }
            point -= u64::from(target.weight);
        }
        None
    }
}

/// The rule for `model`, if any.
pub fn rule_for<'a>(rules: &'a [ModelRewrite], model: &str) -> Option<&'a ModelRewrite> {
    rules.iter().find(|rule| rule.model == model)
}

/// `body` with its top-level `model` value replaced by `model` (added first if it has none),
/// every other byte as it came: a JSON schema's property order (structured output generates in
/// it), numbers of any size, white space. A key given twice has its last value replaced, which
/// is the one vLLM reads ([`crate::request::find_model`]). `None` if no model can be read from
/// `body` (not a JSON object).
pub fn rewrite_body(body: &[u8], model: &str) -> Option<Vec<u8>> {
    let place = crate::request::find_model(body).ok()?;
    // A JSON string: quotes, backslashes and control characters escaped.
    let name = serde_json::to_string(model).ok()?;
    let mut rewritten = Vec::with_capacity(body.len() + name.len() + ADDED_MEMBER_BYTES);
    match place.value {
        Some(value) => {
            rewritten.extend_from_slice(body.get(..value.start)?);
            rewritten.extend_from_slice(name.as_bytes());
            rewritten.extend_from_slice(body.get(value.end..)?);
        }
        None => {
            rewritten.extend_from_slice(body.get(..place.members_start)?);
            rewritten.extend_from_slice(b"\"model\":");
            rewritten.extend_from_slice(name.as_bytes());
            if !place.empty {
                rewritten.push(b',');
            }
            rewritten.extend_from_slice(body.get(place.members_start..)?);
        }
    }
    Some(rewritten)
}

/// `"model":` and a comma: what an added member costs besides its value.
const ADDED_MEMBER_BYTES: usize = 9;

#[cfg(test)]
mod tests {
    use super::*;

    fn canary() -> ModelRewrite {
        let target = |model: &str, weight| WeightedTarget { model: model.into(), weight };
        ModelRewrite { model: "public".into(), targets: vec![target("v1", 90), target("v2", 10)] }
    }

    #[test]
    fn draws_map_onto_targets_by_weight() {
        let rule = canary();
        rule.validate().unwrap();
        let counts = (0..100).fold([0, 0], |mut counts, point| {
            match rule.target(|total| point % total) {
                Some("v1") => counts[0] += 1,
                Some("v2") => counts[1] += 1,
                other => panic!("{other:?}"),
            }
            counts
        });
        assert_eq!(counts, [90, 10]);
        assert!(rule_for(std::slice::from_ref(&rule), "public").is_some() && rule_for(&[rule], "v1").is_none());
    }

    #[test]
    fn bad_rules_are_refused_and_bodies_rewritten() {
        let mut rule = canary();
        rule.targets.iter_mut().for_each(|t| t.weight = 0);
        assert!(rule.validate().is_err());
        rule.targets.iter_mut().for_each(|t| t.weight = u32::MAX);
        assert!(rule.validate().is_err(), "a total past 32 bits would starve the last target in Wasm");
        let body = rewrite_body(br#"{"model":"public","prompt":"hi","stream":true}"#, "v2").unwrap();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((value["model"].as_str(), value["prompt"].as_str()), (Some("v2"), Some("hi")));
        assert!(rewrite_body(b"[1]", "v2").is_none());
    }

    #[test]
    fn a_rewrite_changes_the_model_value_and_no_other_byte() {
        // Structured output generates fields in the schema's order: "reasoning" must stay first.
        let schema = r#"{"type":"object","properties":{"reasoning":{"type":"string"},"answer":{"type":"string"}}}"#;
        let body = format!(
            r#"{{ "model": "public", "messages":[{{"role":"user","content":"hi"}}],
               "response_format":{{"type":"json_schema","json_schema":{{"name":"x","schema":{schema}}}}},
               "seed": 18446744073709551616, "x": 1e400, "t": 0.70 }}"#
        );
        let rewritten = rewrite_body(body.as_bytes(), "v2").unwrap();
        assert_eq!(String::from_utf8(rewritten).unwrap(), body.replacen(r#""public""#, r#""v2""#, 1));
    }

    #[test]
    fn a_rewrite_sets_the_model_vllm_reads_in_any_body_it_reads() {
        let rewrite = |body: &[u8]| String::from_utf8(rewrite_body(body, "v2").unwrap()).unwrap();
        // A key given twice: Python keeps the last, so the last is the one rewritten.
        assert_eq!(rewrite(br#"{"model":"a","model":"public"}"#), r#"{"model":"a","model":"v2"}"#);
        assert_eq!(
            rewrite("\u{feff}{\"model\":\"public\",\"t\":NaN}".as_bytes()),
            "\u{feff}{\"model\":\"v2\",\"t\":NaN}"
        );
        assert_eq!(rewrite(br#"{"prompt":"x"}"#), r#"{"model":"v2","prompt":"x"}"#);
        assert_eq!(rewrite(b" { } "), r#" {"model":"v2" } "#);
        let quoted = rewrite_body(br#"{"model":"public"}"#, "a\"b\\c").unwrap();
        let value: serde_json::Value = serde_json::from_slice(&quoted).unwrap();
        assert_eq!(value["model"], "a\"b\\c", "the name is escaped as a JSON string");
        assert!(rewrite_body(br#"{"model":"public""#, "v2").is_none());
    }
}
