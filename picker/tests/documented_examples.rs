//! The configuration examples users copy from the docs parse and validate with the plugin's own
//! parsers: every fenced `json` block of the docs below, the JSON a shell example writes
//! (`echo '{...}'`), every Helm `--set-json 'filter...={...}'`, and the inline examples listed
//! in `INLINE`. A block that is no plugin configuration (an access-log line) is listed in
//! `EXAMPLES` as such; a block the list does not know fails the test, so a new one is checked.
//! A `"..."` placeholder (a secret) is replaced by a valid secret before validation.

// Test support: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use picker::config::{parse_json, FilterConfig, PollerConfig};
use picker::discovery::KubernetesConfig;

const DOCS: [(&str, &str); 5] = [
    ("README.md", include_str!("../../README.md")),
    ("docs/configuration.md", include_str!("../../docs/configuration.md")),
    ("docs/deployment.md", include_str!("../../docs/deployment.md")),
    ("docs/design.md", include_str!("../../docs/design.md")),
    ("k8s/README.md", include_str!("../../k8s/README.md")),
];

/// What an example configures, and how it is made a whole configuration.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// The filter's configuration, whole.
    Filter,
    /// The singleton's configuration, whole.
    Singleton,
    /// The singleton's `kubernetes` section.
    Kubernetes,
    /// The filter's `peer_receiver` section.
    PeerReceiver,
    /// A `"peers": {...}` member of the singleton's configuration.
    PeersMember,
    /// `"field": value` members of the filter's configuration.
    FilterMember,
    /// `"field": value` members of the singleton's configuration (a static pool added unless
    /// they give one or `kubernetes`).
    SingletonMember,
    /// `"field": value` members of the singleton's `peers` section (its secret added).
    InPeers,
    /// The value of `models.rewrites`.
    Rewrites,
    /// Not a plugin configuration (an access-log line).
    NotConfig,
}

/// Fenced `json` blocks, each known by a piece of its first line.
const EXAMPLES: &[(&str, &str, Kind)] = &[
    ("docs/configuration.md", r#"{"kubernetes": {"namespace": "llm", "label_selector""#, Kind::Singleton),
    ("docs/configuration.md", r#"{"models": {"#, Kind::Filter),
    ("docs/configuration.md", r#"{ "comparison": { "baseline_share": 0.5"#, Kind::Filter),
    ("docs/configuration.md", r#"{ "pool": [], "pd": { "threshold_tokens": 1024 } }"#, Kind::Filter),
    ("docs/deployment.md", r#""peers": {"#, Kind::PeersMember),
    ("docs/deployment.md", r#"{"start":"#, Kind::NotConfig),
];

/// Inline examples (in backquotes in the text), each checked to be still in its document.
const INLINE: &[(&str, &str, Kind)] = &[
    ("docs/configuration.md", r#"{ "secret": "...", "path": "/wasm-epp/v1/peer" }"#, Kind::PeerReceiver),
    ("docs/deployment.md", r#"{"peer_receiver": {"secret": "..."}}"#, Kind::Filter),
    ("k8s/README.md", r#"{"namespace": "llm", "inference_pool": "qwen-pool"}"#, Kind::Kubernetes),
    (
        "docs/configuration.md",
        r#"[{"model": "public", "targets": [{"model": "v1", "weight": 90}, {"model": "v2", "weight": 10}]}]"#,
        Kind::Rewrites,
    ),
    ("README.md", r#""debug_decision_header": true"#, Kind::FilterMember),
    ("docs/deployment.md", r#""learning": {"enabled": true}"#, Kind::FilterMember),
    ("docs/deployment.md", r#""comparison": {"baseline_share": 0.5}"#, Kind::FilterMember),
    ("docs/deployment.md", r#""pd": {"threshold_tokens": 1024}"#, Kind::FilterMember),
    (
        "docs/deployment.md",
        r#""kubernetes": {"namespace": "llm", "inference_pool": "qwen-pool"}"#,
        Kind::SingletonMember,
    ),
    ("docs/deployment.md", r#""peers": ["10.0.0.5:8081", "10.0.0.6:8081"]"#, Kind::InPeers),
    (
        "docs/deployment.md",
        r#""roles": {"10.0.0.1:8000": "prefill", "10.0.0.2:8000": "decode"}"#,
        Kind::SingletonMember,
    ),
];

const SECRET: &str = "a-shared-secret-of-some-length";

/// Parses and validates `text` as `kind`; `Err` names what refused it.
fn check(kind: Kind, text: &str) -> Result<(), String> {
    let text = text.replace(r#""...""#, &format!("\"{SECRET}\""));
    let (kind, text) = match kind {
        Kind::PeerReceiver => (Kind::Filter, format!(r#"{{"peer_receiver": {text}}}"#)),
        Kind::PeersMember => (Kind::Singleton, format!(r#"{{"pool": ["10.0.0.1:8000"], {text}}}"#)),
        Kind::FilterMember => (Kind::Filter, format!("{{{text}}}")),
        Kind::SingletonMember if text.contains(r#""kubernetes""#) => (Kind::Singleton, format!("{{{text}}}")),
        Kind::SingletonMember => {
            (Kind::Singleton, format!(r#"{{"pool": ["10.0.0.1:8000", "10.0.0.2:8000"], {text}}}"#))
        }
        Kind::InPeers => {
            (Kind::Singleton, format!(r#"{{"pool": ["10.0.0.1:8000"], "peers": {{{text}, "secret": "{SECRET}"}}}}"#))
        }
        Kind::Rewrites => (Kind::Filter, format!(r#"{{"models": {{"rewrites": {text}}}}}"#)),
        kind => (kind, text),
    };
    let bytes = text.as_bytes();
    match kind {
        Kind::Filter => parse_json::<FilterConfig>(bytes)?.validate().map(drop),
        Kind::Singleton => parse_json::<PollerConfig>(bytes)?.validate().map(drop),
        Kind::Kubernetes => parse_json::<KubernetesConfig>(bytes)?.validate().map(drop),
        _ => Ok(()),
    }
}

/// `(document, first line, text)` of every fenced block in `lang`.
fn fenced(lang: &str) -> Vec<(&'static str, String, String)> {
    let mut blocks = Vec::new();
    for (doc, text) in DOCS {
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line.trim_start() != format!("```{lang}") {
                continue;
            }
            let body: Vec<&str> = lines.by_ref().take_while(|l| !l.trim_start().starts_with("```")).collect();
            let first = body.first().map_or(String::new(), |l| l.trim().to_string());
            blocks.push((doc, first, body.join("\n")));
        }
    }
    blocks
}

#[test]
fn every_fenced_json_example_is_a_valid_configuration() {
    let mut problems = Vec::new();
    let blocks = fenced("json");
    assert!(blocks.len() >= EXAMPLES.len(), "the json blocks were not found: {}", blocks.len());
    for (doc, first, body) in &blocks {
        let known = EXAMPLES.iter().find(|(d, start, _)| d == doc && first.starts_with(start));
        match known {
            None => problems.push(format!("{doc}: a json block not in EXAMPLES: {first}")),
            Some((_, _, kind)) => {
                if let Err(e) = check(*kind, body) {
                    problems.push(format!("{doc}: {first}: {e}"));
                }
            }
        }
    }
    for (doc, start, _) in EXAMPLES {
        if !blocks.iter().any(|(d, first, _)| d == doc && first.starts_with(start)) {
            problems.push(format!("{doc}: EXAMPLES lists a block no longer there: {start}"));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn every_inline_example_is_a_valid_configuration() {
    let mut problems = Vec::new();
    for (doc, example, kind) in INLINE {
        let text = DOCS.iter().find(|(d, _)| d == doc).unwrap().1;
        if !text.contains(&format!("`{example}`")) {
            problems.push(format!("{doc}: INLINE lists an example no longer there: {example}"));
        } else if let Err(e) = check(*kind, example) {
            problems.push(format!("{doc}: {example}: {e}"));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The JSON between `'` quotes after `marker` on a line of a shell block.
fn quoted_after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &line[line.find(marker)? + marker.len()..];
    rest.split_once('\'').map(|(json, _)| json)
}

/// The filter configurations shell examples write to a file (`echo '{...}' > file.json`, for
/// make run's FILTER_CONFIG); Helm's `--set-json 'filter...'` is the test above's.
#[test]
fn the_filter_configurations_of_shell_examples_are_valid() {
    let mut problems = Vec::new();
    let mut found = 0;
    for (doc, _, body) in fenced("sh") {
        for line in body.lines() {
            let Some(json) = quoted_after(line, "echo '{").map(|rest| format!("{{{rest}")) else { continue };
            found += 1;
            if let Err(e) = check(Kind::Filter, &json) {
                problems.push(format!("{doc}: {json}: {e}"));
            }
        }
    }
    // README's FILTER_CONFIG file.
    assert!(found >= 1, "the shell examples' configurations were not found: {found}");
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// `value` set at the dotted `path` of an empty object (`.pd` and `{...}`: `{"pd": {...}}`).
fn at_path(path: &str, value: &str) -> String {
    path.split('.')
        .filter(|part| !part.is_empty())
        .rev()
        .fold(value.to_string(), |inner, part| format!(r#"{{"{part}": {inner}}}"#))
}

#[test]
fn every_helm_filter_value_in_the_docs_is_a_valid_configuration() {
    let mut problems = Vec::new();
    let mut found = 0;
    for (doc, text) in DOCS {
        for (at, _) in text.match_indices("--set-json 'filter") {
            let rest = &text[at + "--set-json 'filter".len()..];
            let Some((path, rest)) = rest.split_once('=') else { continue };
            let Some((value, _)) = rest.split_once('\'') else { continue };
            found += 1;
            if let Err(e) = check(Kind::Filter, &at_path(path, value)) {
                problems.push(format!("{doc}: filter{path}={value}: {e}"));
            }
        }
    }
    // deployment.md's weights, pd, learning (twice) and comparison.
    assert!(found >= 5, "the Helm filter values were not found: {found}");
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}
