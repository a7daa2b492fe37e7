//! A pod's `GET /v1/models` answer: its base model(s) and LoRA adapters.
//!
//! vLLM lists the base model with `"parent": null` and each adapter with its base as `parent`.
//! The answer comes from a pod, so it is bounded: at most `max_bytes` read and `max_names`
//! names of each kind kept (the pool service's `max_models_bytes` and `max_names_per_pod`),
//! over-long names dropped.

use serde::Deserialize;

use super::name_list::NameList;

/// What `/v1/models` says a pod serves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    /// Models without a parent (base models and their served names).
    pub base: Vec<String>,
    /// Models with a parent (LoRA adapters).
    pub adapters: Vec<String>,
    /// A name was dropped (over-long, or past the bound): the pod serves more than listed.
    pub cut: bool,
}

#[derive(Deserialize)]
struct ModelList<'a> {
    #[serde(borrow)]
    data: Vec<ModelCard<'a>>,
}

#[derive(Deserialize)]
struct ModelCard<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    parent: Option<std::borrow::Cow<'a, str>>,
}

/// Parses a `/v1/models` body; errors say why it is not a model list.
pub fn parse_catalog(body: &[u8], max_bytes: usize, max_names: usize) -> Result<Catalog, String> {
    if body.len() > max_bytes {
        return Err(format!("/v1/models answer of {} bytes is over {max_bytes}", body.len()));
    }
    let list: ModelList<'_> = serde_json::from_slice(body).map_err(|e| format!("/v1/models does not parse: {e}"))?;
    let (mut base, mut adapters) = (NameList::new(max_names), NameList::new(max_names));
    let mut cut = false;
    for card in &list.data {
        let list = if card.parent.is_some() { &mut adapters } else { &mut base };
        cut |= !list.push(&card.id);
    }
    Ok(Catalog { base: base.into_names(), adapters: adapters.into_names(), cut })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: usize = super::super::DEFAULT_NAMES_PER_POD;

    #[test]
    fn base_models_and_adapters_are_told_apart() {
        let body = br#"{"object":"list","data":[
            {"id":"base","object":"model","parent":null,"max_model_len":4096},
            {"id":"a","object":"model","parent":"base","root":"/adapters/a"}]}"#;
        let catalog = parse_catalog(body, 4096, NAMES).unwrap();
        assert_eq!((catalog.base, catalog.adapters), (vec!["base".to_owned()], vec!["a".to_owned()]));
    }

    #[test]
    fn oversized_or_foreign_answers_are_errors() {
        assert!(parse_catalog(&[b' '; 100], 10, NAMES).is_err());
        assert!(parse_catalog(b"<html>", 100, NAMES).is_err());
        let many: Vec<String> = (0..500).map(|i| format!("{{\"id\":\"m{i}\"}}")).collect();
        let body = format!("{{\"data\":[{}]}}", many.join(","));
        let catalog = parse_catalog(body.as_bytes(), 1 << 20, NAMES).unwrap();
        assert_eq!(catalog.base.len(), NAMES);
        assert!(catalog.cut, "the pod lists more than is kept");
        assert!(!parse_catalog(br#"{"data":[{"id":"a"}]}"#, 100, NAMES).unwrap().cut);
    }

    #[test]
    fn a_list_keeps_the_configured_number_of_names_of_each_kind() {
        let body = |adapters: usize| {
            let cards = (0..adapters).map(|i| format!(r#"{{"id":"t-{i}","parent":"base"}}"#));
            let cards: Vec<String> = std::iter::once(r#"{"id":"base"}"#.to_owned()).chain(cards).collect();
            format!(r#"{{"data":[{}]}}"#, cards.join(","))
        };
        let whole = parse_catalog(body(300).as_bytes(), 1 << 20, 300).unwrap();
        assert_eq!((whole.base.len(), whole.adapters.len(), whole.cut), (1, 300, false));
        let cut = parse_catalog(body(301).as_bytes(), 1 << 20, 300).unwrap();
        assert_eq!((cut.adapters.len(), cut.adapters.last().map(String::as_str), cut.cut), (300, Some("t-299"), true));
        let default = parse_catalog(body(100).as_bytes(), 1 << 20, NAMES).unwrap();
        assert_eq!((default.adapters.len(), default.cut), (NAMES, true));
    }
}
