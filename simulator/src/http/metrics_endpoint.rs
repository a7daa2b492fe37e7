//! `GET /metrics`: the Prometheus document, delayed, failed or garbled on request.
//!
//! `?name[]=a&name[]=b` keeps only the samples with those names (and their HELP/TYPE
//! lines), as `prometheus_client`'s exposition of ordinary collectors does: a scraper that
//! asks only for what it reads gets a page of a few hundred bytes instead of tens of KB.

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
    let snapshot = pod.metrics_snapshot();
    let pd_counters = pod.lock().pd;
    let text =
        snapshot.render() + &crate::pd::metrics::render(pod.config().role, &pd_counters, snapshot.metrics.created_unix);
    let text = crate::metrics::name_filter::restrict_to_query(&text, query).unwrap_or(text);
    let body = match faults.metrics_garbage {
        GarbageMode::Text => {
            "<html><body>502 Bad Gateway</body></html>\n\u{0}\u{1}garbage {{{ not prometheus\n".to_owned()
        }
        GarbageMode::Truncated => truncate_mid_line(&text),
        GarbageMode::Off | GarbageMode::Nan | GarbageMode::Negative => text,
    };
    full_response(200, PROMETHEUS_CONTENT_TYPE, body)
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
