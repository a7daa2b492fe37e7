//! From the outcomes of one target's run to the figures the goals name: TTFT p99 per class
//! against the idle pool's, how fast sheddable requests are refused after their TTL, Jain's
//! index between the two tenants on completed tokens, and whether every request got an
//! answer.

use serde::Serialize;

use super::client::Outcome;
use super::load::Class;
use crate::summary::percentile;

#[derive(Debug, Clone, Serialize)]
pub struct ClassRow {
    pub class: &'static str,
    pub sent: usize,
    pub ok: usize,
    pub rejected_429: usize,
    pub unavailable_503: usize,
    /// No answer (timeout, connection error) or another status.
    pub failed: usize,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    /// Latency of the 429 answers, p99.
    pub refused_p99_ms: Option<f64>,
    pub tokens: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TargetRow {
    pub target: String,
    pub classes: Vec<ClassRow>,
    /// Jain's index over the two standard tenants' tokens completed while the overload
    /// lasted (both backlogged; the drain afterwards is not "both backlogged"), 1 = equal.
    pub tenant_jain: f64,
    /// Those tokens, tenant A and tenant B.
    pub tenant_tokens_in_window: (u64, u64),
    /// Critical TTFT p99 over the idle pool's TTFT p99.
    pub critical_ttft_vs_idle: Option<f64>,
    /// Sheddable 429 latency p99 minus the sheddable TTL (flow control only), ms.
    pub sheddable_429_after_ttl_p99_ms: Option<f64>,
    /// Every request answered 200, 429 or 503 (no timeout, no connection error).
    pub all_answered: bool,
    /// Completed output tokens per second over the run.
    pub output_tokens_per_s: f64,
    /// Envoy's peak resident memory during the run (wasm-epp targets), MB.
    pub envoy_peak_rss_mb: Option<f64>,
}

pub fn summarize(
    target: &str,
    outcomes: &[Outcome],
    idle_ttft_p99_ms: f64,
    sheddable_ttl_ms: Option<u64>,
    seconds: f64,
    window_ms: u64,
) -> TargetRow {
    let classes: Vec<ClassRow> = Class::ALL.iter().map(|class| class_row(*class, outcomes)).collect();
    let in_window = |class: Class| -> u64 {
        outcomes
            .iter()
            .filter(|o| o.class == class && o.status == 200 && o.error.is_none())
            .filter(|o| o.sent_at_ms as f64 + o.total_ms <= window_ms as f64)
            .map(|o| o.tokens)
            .sum()
    };
    let tenant_tokens_in_window = (in_window(Class::StandardA), in_window(Class::StandardB));
    let (a, b) = (tenant_tokens_in_window.0 as f64, tenant_tokens_in_window.1 as f64);
    let tenant_jain = if a + b > 0.0 { (a + b).powi(2) / (2.0 * (a * a + b * b)) } else { 0.0 };
    let critical = classes.iter().find(|c| c.class == "critical").and_then(|c| c.ttft_p99_ms);
    let sheddable_refusals: Vec<f64> =
        outcomes.iter().filter(|o| o.class == Class::Sheddable && o.status == 429).map(|o| o.total_ms).collect();
    let after_ttl = sheddable_ttl_ms.and_then(|ttl| p(&sheddable_refusals, 0.99).map(|latency| latency - ttl as f64));
    TargetRow {
        target: target.to_string(),
        all_answered: classes.iter().all(|c| c.failed == 0),
        output_tokens_per_s: classes.iter().map(|c| c.tokens).sum::<u64>() as f64 / seconds.max(1.0),
        classes,
        tenant_jain,
        tenant_tokens_in_window,
        critical_ttft_vs_idle: critical.map(|p99| p99 / idle_ttft_p99_ms.max(1e-9)),
        sheddable_429_after_ttl_p99_ms: after_ttl,
        envoy_peak_rss_mb: None,
    }
}

fn class_row(class: Class, outcomes: &[Outcome]) -> ClassRow {
    let mine: Vec<&Outcome> = outcomes.iter().filter(|o| o.class == class).collect();
    let ttfts: Vec<f64> = mine.iter().filter_map(|o| o.ttft_ms).collect();
    let refused: Vec<f64> = mine.iter().filter(|o| o.status == 429).map(|o| o.total_ms).collect();
    let count = |status: u16| mine.iter().filter(|o| o.status == status && o.error.is_none()).count();
    let (ok, r429, r503) = (count(200), count(429), count(503));
    ClassRow {
        class: class.label(),
        sent: mine.len(),
        ok,
        rejected_429: r429,
        unavailable_503: r503,
        failed: mine.len() - ok - r429 - r503,
        ttft_p50_ms: p(&ttfts, 0.5),
        ttft_p99_ms: p(&ttfts, 0.99),
        refused_p99_ms: p(&refused, 0.99),
        tokens: mine.iter().filter(|o| o.status == 200 && o.error.is_none()).map(|o| o.tokens).sum(),
    }
}

pub fn p(values: &[f64], quantile: f64) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    percentile(&sorted, quantile).map(|v| (v * 10.0).round() / 10.0)
}

/// The Markdown table of the run.
pub fn markdown_table(rows: &[TargetRow]) -> String {
    let mut out = String::from(
        "| target | class | sent | 200 | 429 | 503 | failed | TTFT p50 ms | TTFT p99 ms | 429 p99 ms | tokens |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    for row in rows {
        for c in &row.classes {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.target,
                c.class,
                c.sent,
                c.ok,
                c.rejected_429,
                c.unavailable_503,
                c.failed,
                show(c.ttft_p50_ms),
                show(c.ttft_p99_ms),
                show(c.refused_p99_ms),
                c.tokens
            ));
        }
    }
    out.push_str("\n| target | critical TTFT p99 / idle | sheddable 429 p99 after TTL ms | tenant tokens A:B in overload | Jain (tenants) | all answered | out tok/s | Envoy peak RSS MB |\n|---|---:|---:|---:|---:|---|---:|---:|\n");
    for row in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {}:{} | {:.3} | {} | {:.0} | {} |\n",
            row.target,
            row.critical_ttft_vs_idle.map_or("-".into(), |v| format!("{v:.2}")),
            show(row.sheddable_429_after_ttl_p99_ms),
            row.tenant_tokens_in_window.0,
            row.tenant_tokens_in_window.1,
            row.tenant_jain,
            if row.all_answered { "yes" } else { "no" },
            row.output_tokens_per_s,
            row.envoy_peak_rss_mb.map_or("-".into(), |mb| format!("{mb:.1}")),
        ));
    }
    out
}
