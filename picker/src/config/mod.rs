//! Plugin configuration: parsed with serde, then validated once in `on_configure`.
//!
//! A bad configuration fails the plugin at start with a message naming the field, never on
//! the first request. Unknown fields are errors, so a typo is caught instead of ignored.

mod comparison;
mod filter;
mod flow;
mod learning;
mod models;
mod outliers;
mod pd;
mod peers;
mod poller;
mod prefix;

pub use comparison::{BaselinePolicy, ComparisonConfig};
pub use filter::{stale_before_next_scrape, FilterConfig, InvalidBodyPolicy, ScorerWeights};
pub use flow::{FlowControlConfig, StaleMetricsPolicy, MAX_PRIORITY, MAX_TTL_MS};
pub use learning::{LearningConfig, TtftScore, MAX_USAGE_STREAMS_PER_POD};
pub use models::{ModelsConfig, UnknownModelPolicy};
pub use outliers::OutlierConfig;
pub use pd::PdConfig;
pub use peers::{PeerReceiverConfig, PeersConfig, DEFAULT_PEER_PATH, PEER_REPLICA_HEADER, PEER_SECRET_HEADER};
pub use poller::PollerConfig;
pub use prefix::PrefixConfig;

use crate::address::PodAddress;

/// Parses a JSON configuration; empty configuration means all defaults.
///
/// The error names the field whose value serde refused (`prefix.max_blocks: invalid value:
/// integer `-1`, expected usize`): serde_json's own message gives only a line and column,
/// which in Envoy's YAML point into a one-line string.
pub fn parse_json<T: serde::de::DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, String> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes).map_err(|e| {
        let field = field_at(bytes, e.line(), e.column());
        match field.is_empty() {
            true => format!("configuration is not valid: {e}"),
            false => format!("configuration is not valid: {field}: {e}"),
        }
    })
}

/// Deepest configuration nesting [`field_at`] follows (the configuration is a few levels deep;
/// deeper input is named by its first levels).
const MAX_FIELD_DEPTH: usize = 16;

/// The dotted path (`models.rewrites[0].targets`) of the value being read at `line` and
/// `column` (serde_json's 1-based position of an error: the bytes read so far), or of the
/// object whose key was just read there (an unknown field names itself). Empty at the top.
fn field_at(bytes: &[u8], line: usize, column: usize) -> String {
    enum Level {
        Object { key: Option<String>, after_colon: bool },
        Array(usize),
    }
    let line_start = match line {
        0 | 1 => 0,
        _ => bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(line - 2).map_or(bytes.len(), |(i, _)| i + 1),
    };
    let end = line_start.saturating_add(column).min(bytes.len());
    let mut levels: Vec<Level> = Vec::new();
    let mut depth = 0usize;
    let mut string: Option<Vec<u8>> = None;
    let mut escaped = false;
    for &byte in bytes.get(..end).unwrap_or_default() {
        if let Some(text) = string.as_mut() {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => {
                    let text = string.take().unwrap_or_default();
                    if let Some(Level::Object { key, after_colon: false }) = levels.last_mut() {
                        *key = Some(String::from_utf8_lossy(&text).into_owned());
                    }
                    continue;
                }
                _ => {}
            }
            text.push(byte);
            continue;
        }
        match byte {
            b'"' => string = Some(Vec::new()),
            b'{' | b'[' => {
                depth += 1;
                if depth <= MAX_FIELD_DEPTH {
                    levels.push(match byte {
                        b'{' => Level::Object { key: None, after_colon: false },
                        _ => Level::Array(0),
                    });
                }
            }
            b'}' | b']' => {
                if depth <= MAX_FIELD_DEPTH {
                    levels.pop();
                }
                depth = depth.saturating_sub(1);
            }
            b':' => {
                if let Some(Level::Object { after_colon, .. }) = levels.last_mut() {
                    *after_colon = true;
                }
            }
            b',' => match levels.last_mut() {
                Some(Level::Object { after_colon, .. }) => *after_colon = false,
                Some(Level::Array(index)) => *index += 1,
                None => {}
            },
            _ => {}
        }
    }
    let mut path = String::new();
    for level in &levels {
        match level {
            // A key read but no value yet: the error is about the key (unknown), not its value.
            Level::Object { key: Some(key), after_colon: true } => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
            }
            Level::Object { .. } => break,
            Level::Array(index) => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

/// Validates a list of pod addresses from configuration.
pub fn parse_pool(entries: &[String]) -> Result<Vec<PodAddress>, String> {
    let mut pool = Vec::with_capacity(entries.len());
    for entry in entries {
        let address = PodAddress::parse(entry).map_err(|e| format!("pool: {e}"))?;
        if pool.contains(&address) {
            return Err(format!("pool: {address} is listed twice"));
        }
        pool.push(address);
    }
    if pool.len() > crate::pod_table::MAX_PODS {
        return Err(format!("pool: {} pods, at most {}", pool.len(), crate::pod_table::MAX_PODS));
    }
    Ok(pool)
}

/// The one DNS label a pool may not be named: the word before the per-pod stats' label.
pub const RESERVED_POOL_NAME: &str = "pod";

/// A pool's name in the stats (`pool_name`): empty, or a DNS label (as Kubernetes names an
/// InferencePool), so it sits between two dots of a stat name and the bootstrap's `pool`
/// tag rule finds it.
fn check_pool_name(name: &str) -> Result<(), String> {
    if !name.is_empty() && !crate::discovery::config::is_dns_label(name) {
        return Err(format!(
            "pool_name '{name}' must be a DNS label: at most 63 lower-case letters, digits and '-', not first or last"
        ));
    }
    // `wasm_epp.pool.pod.<stat>` reads as the per-pod label rule's `<family>.pod.<label>`.
    if name == RESERVED_POOL_NAME {
        return Err(format!("pool_name '{name}' is reserved: the stats' pod label would take it"));
    }
    Ok(())
}

/// A header name as Envoy hands headers to the plugin: lower-case letters, digits and '-'.
fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-' || b.is_ascii_digit())
}

/// A header the filter reads or writes: `field` names it in the error.
pub(crate) fn check_header(field: &str, name: &str) -> Result<(), String> {
    if !is_header_name(name) {
        return Err(format!("{field} '{name}' must be a lower-case header name"));
    }
    Ok(())
}

/// As [`check_header`], or empty (the header is then not read or written).
pub(crate) fn check_optional_header(field: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Ok(());
    }
    check_header(field, name)
}

/// A list of header names read in order (a name and its aliases): at most
/// [`models::MAX_HEADER_ALIASES`], each a lower-case header name.
pub(crate) fn check_header_list(field: &str, list: &[String]) -> Result<(), String> {
    if list.len() > models::MAX_HEADER_ALIASES || !list.iter().all(|h| is_header_name(h)) {
        return Err(format!("{field}: at most {} lower-case header names", models::MAX_HEADER_ALIASES));
    }
    Ok(())
}

/// A path the filter compares with a request's `:path` (the health probe, the model list).
fn is_absolute_visible_path(path: &str) -> bool {
    path.starts_with('/') && path.bytes().all(|b| b > b' ' && b < 0x7f)
}

fn check_range(name: &str, value: u64, min: u64, max: u64) -> Result<(), String> {
    if value < min || value > max {
        return Err(format!("{name} = {value}, must be within {min}..={max}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(json: &str) -> String {
        parse_json::<FilterConfig>(json.as_bytes()).unwrap_err()
    }

    #[test]
    fn a_value_of_the_wrong_type_or_range_is_named_by_its_field() {
        for (json, field) in [
            (r#"{"max_body_bytes": "4194304"}"#, "max_body_bytes: invalid type"),
            (r#"{"prefix": {"enabled": true, "max_blocks": -1}}"#, "prefix.max_blocks: invalid value"),
            (r#"{"fallback_destinations": 2.0}"#, "fallback_destinations: invalid type"),
            (r#"{"learning": {"usage_streams_per_pod": 70000}}"#, "learning.usage_streams_per_pod: invalid value"),
            (r#"{"flow_control": {"stale_metrics": "stale"}}"#, "flow_control.stale_metrics: unknown variant"),
            (
                r#"{"models": {"rewrites": [{"model": "a", "targets": [{"model": "b", "weight": 1}, {"model": "c", "weight": -1}]}]}}"#,
                "models.rewrites[0].targets[1].weight: invalid value",
            ),
            // Over several lines, as Helm's toPrettyJson writes it; a key with a quote in it.
            (
                "{\n  \"pool_name\": \"a\\\"b\",\n  \"weights\": {\n    \"queue\": \"1\"\n  }\n}",
                "weights.queue: invalid type",
            ),
        ] {
            let error = error_of(json);
            assert!(error.contains(field), "{json}: {error}");
        }
    }

    #[test]
    fn an_unknown_field_is_named_with_the_section_it_is_in() {
        let error = error_of(r#"{"prefix": {"blok_tokens": 16}}"#);
        assert!(error.contains("prefix: unknown field `blok_tokens`"), "{error}");
        let error = error_of(r#"{"weigths": {}}"#);
        assert!(error.starts_with("configuration is not valid: unknown field `weigths`"), "{error}");
        let error = error_of(r#"{"pool": [], "#);
        assert!(error.contains("EOF"), "{error}");
    }
}
