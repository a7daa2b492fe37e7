//! The configuration examples users copy from the docs parse and validate with the plugin's own
//! parsers: every fenced `json` block of the docs below, the JSON a shell example writes
//! (`echo '{...}'`, Helm's `--set-json 'filter={...}'`), and the inline examples listed in
//! `INLINE`. A block that is no plugin configuration (an access-log line) is listed in
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
];

const SECRET: &str = "a-shared-secret-of-some-length";

/// Parses and validates `text` as `kind`; `Err` names what refused it.
fn check(kind: Kind, text: &str) -> Result<(), String> {
    let text = text.replace(r#""...""#, &format!("\"{SECRET}\""));
    let (kind, text) = match kind {
        Kind::PeerReceiver => (Kind::Filter, format!(r#"{{"peer_receiver": {text}}}"#)),
        Kind::PeersMember => (Kind::Singleton, format!(r#"{{"pool": ["10.0.0.1:8000"], {text}}}"#)),
        kind => (kind, text),
    };
    let bytes = text.as_bytes();
    match kind {
        Kind::Filter => parse_json::<FilterConfig>(bytes)?.validate().map(drop),
        Kind::Singleton => parse_json::<PollerConfig>(bytes)?.validate().map(drop),
        Kind::Kubernetes => parse_json::<KubernetesConfig>(bytes)?.validate().map(drop),
        Kind::PeerReceiver | Kind::PeersMember | Kind::NotConfig => Ok(()),
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

#[test]
fn the_filter_configurations_of_shell_examples_are_valid() {
    let mut problems = Vec::new();
    let mut found = 0;
    for (doc, _, body) in fenced("sh") {
        for line in body.lines() {
            let Some(json) = quoted_after(line, "echo '{")
                .map(|rest| format!("{{{rest}"))
                .or_else(|| quoted_after(line, "filter=").map(str::to_string))
            else {
                continue;
            };
            found += 1;
            if let Err(e) = check(Kind::Filter, &json) {
                problems.push(format!("{doc}: {json}: {e}"));
            }
        }
    }
    // README's FILTER_CONFIG file and deployment.md's Helm --set-json.
    assert!(found >= 2, "the shell examples' configurations were not found: {found}");
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}
