//! `GET /metrics`: the Prometheus document, delayed, failed or garbled on request.
//!
//! `?name[]=a&name[]=b` keeps only the samples with those names (and their HELP/TYPE
//! lines), as vLLM's `prometheus_client` exposition does: a scraper that asks only for what
//! it reads gets a page of a few hundred bytes instead of tens of KB.

use std::time::Duration;

use hyper::Response;

use super::body::{full_response, SimBody};
use crate::faults::GarbageMode;
use crate::pod::Pod;

/// Content type of Prometheus text format 0.0.4, as `prometheus_client` sends it.
const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders `/metrics`, applying the `metrics_*` faults.
pub async fn metrics(pod: &Pod, query: Option<&str>) -> Response<SimBody> {
    let faults = pod.faults();
    if faults.metrics_delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(faults.metrics_delay_ms)).await;
    }
    if faults.metrics_fail {
        return full_response(500, "text/plain; charset=utf-8", "metrics exporter failed (fault injection)");
    }
    let text = pod.metrics_snapshot().render();
    let text = match requested_names(query) {
        Some(names) => restrict(&text, &names),
        None => text,
    };
    let body = match faults.metrics_garbage {
        GarbageMode::Text => {
            "<html><body>502 Bad Gateway</body></html>\n\u{0}\u{1}garbage {{{ not prometheus\n".to_owned()
        }
        GarbageMode::Truncated => truncate_mid_line(&text),
        GarbageMode::Off | GarbageMode::Nan | GarbageMode::Negative => text,
    };
    full_response(200, PROMETHEUS_CONTENT_TYPE, body)
}

/// The `name[]` values of a query string (percent-decoded), if any.
fn requested_names(query: Option<&str>) -> Option<Vec<String>> {
    let names: Vec<String> = query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(key, _)| matches!(*key, "name[]" | "name%5B%5D" | "name%5b%5d"))
        .map(|(_, value)| percent_decode(value))
        .collect();
    (!names.is_empty()).then_some(names)
}

fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (byte, hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Keeps the sample lines whose name is requested, and the comment lines of their families.
fn restrict(text: &str, names: &[String]) -> String {
    let wanted = |name: &str| names.iter().any(|n| n == name);
    let family_wanted = |family: &str| names.iter().any(|n| n.strip_prefix(family).is_some_and(|rest| {
        rest.is_empty() || ["_total", "_bucket", "_sum", "_count", "_created"].contains(&rest)
    }));
    let mut out = String::new();
    for line in text.lines() {
        let keep = match line.strip_prefix("# ") {
            Some(comment) => comment.split_whitespace().nth(1).is_some_and(family_wanted),
            None => wanted(line.split(['{', ' ']).next().unwrap_or_default()),
        };
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Cuts the document in the middle of a sample line, about halfway through.
fn truncate_mid_line(text: &str) -> String {
    let mut cut = text.len() / 2;
    while cut > 0 && !text.is_char_boundary(cut) {
        cut -= 1;
    }
    // Move into a line if the cut landed just after a newline, so the last line is partial.
    let prefix = text.get(..cut).unwrap_or_default();
    let trimmed = prefix.strip_suffix('\n').unwrap_or(prefix);
    trimmed.get(..trimmed.len().saturating_sub(3)).unwrap_or(trimmed).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_ends_inside_a_line() {
        let text = "a_metric 1.0\nb_metric 2.0\nc_metric 3.0\nd_metric 4.0\n";
        let cut = truncate_mid_line(text);
        assert!(cut.len() < text.len());
        assert!(!cut.ends_with('\n'));
        assert!(text.starts_with(&cut));
    }
}

#[cfg(test)]
mod filter_tests {
    use super::*;

    #[test]
    fn name_filters_keep_only_the_requested_samples() {
        let text = "# HELP vllm:num_requests_waiting W\n# TYPE vllm:num_requests_waiting gauge\n\
vllm:num_requests_waiting{model_name=\"m\"} 2.0\nvllm:num_requests_running{model_name=\"m\"} 1.0\n\
# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total{model_name=\"m\"} 5.0\n";
        let names = requested_names(Some("name[]=vllm:num_requests_waiting&name%5B%5D=vllm%3Aprefix_cache_hits_total")).unwrap();
        let kept = restrict(text, &names);
        assert!(kept.contains("vllm:num_requests_waiting{"));
        assert!(kept.contains("vllm:prefix_cache_hits_total{"));
        assert!(kept.contains("# TYPE vllm:prefix_cache_hits counter"));
        assert!(!kept.contains("running"));
        assert_eq!(requested_names(Some("other=1")), None);
        assert_eq!(requested_names(None), None);
    }
}
