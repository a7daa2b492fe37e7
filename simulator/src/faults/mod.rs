//! Injected faults: slow, failing, hanging or lying pods, set at run time through `/sim/faults`.
//!
//! The picker must survive pods that misbehave in every way a real fleet does, and end-to-end
//! tests need to switch such behaviour on and off without restarting anything. Updates are
//! partial (only the keys given change) and unknown keys are refused, so a typo never passes as
//! "no fault".

use serde_json::{json, Map, Value};

/// Longest extra latency accepted (keeps a mistaken value from parking requests for hours).
pub const MAX_EXTRA_LATENCY_MS: u64 = 600_000;

/// How `/metrics` lies when `metrics_garbage` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GarbageMode {
    /// Honest output.
    #[default]
    Off,
    /// A body that is not Prometheus text at all (`true` selects this).
    Text,
    /// Valid text whose gauges and counters are all `NaN`.
    Nan,
    /// Valid text whose gauges and counters are all negative.
    Negative,
    /// The honest document cut in the middle of a line.
    Truncated,
}

impl GarbageMode {
    fn parse(value: &Value) -> Result<Self, String> {
        match value {
            Value::Bool(false) | Value::Null => Ok(Self::Off),
            Value::Bool(true) => Ok(Self::Text),
            Value::String(name) => match name.as_str() {
                "off" => Ok(Self::Off),
                "text" => Ok(Self::Text),
                "nan" => Ok(Self::Nan),
                "negative" => Ok(Self::Negative),
                "truncated" => Ok(Self::Truncated),
                other => Err(format!("metrics_garbage: unknown mode {other:?} (off|text|nan|negative|truncated)")),
            },
            other => Err(format!("metrics_garbage: expected a boolean or a mode name, got {other}")),
        }
    }

    fn to_json(self) -> Value {
        match self {
            Self::Off => json!(false),
            Self::Text => json!("text"),
            Self::Nan => json!("nan"),
            Self::Negative => json!("negative"),
            Self::Truncated => json!("truncated"),
        }
    }
}

/// Values `/metrics` reports instead of the truth (`None` = report the truth).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReportOverrides {
    /// Claimed waiting requests.
    pub waiting: Option<f64>,
    /// Claimed running requests.
    pub running: Option<f64>,
    /// Claimed KV usage.
    pub kv_usage: Option<f64>,
}

/// The current faults of one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    /// Added to every inference request's time to first token (wall clock, not scaled).
    pub extra_latency_ms: u64,
    /// Fraction of inference requests answered at once with `fail_status`.
    pub fail_fraction: f64,
    /// Status of failed requests.
    pub fail_status: u16,
    /// A failed streamed request is answered `200` and its error as the stream's first event
    /// (then `[DONE]`), as vLLM answers a stream whose generation fails: its headers are sent
    /// before it generates. Whole answers still get `fail_status`.
    pub fail_in_stream: bool,
    /// Inference requests are accepted but not answered until cleared (or a bound passes).
    pub hang: bool,
    /// `/metrics` answers this much later.
    pub metrics_delay_ms: u64,
    /// `/metrics` answers 500.
    pub metrics_fail: bool,
    /// `/metrics` lies in this way.
    pub metrics_garbage: GarbageMode,
    /// `/health` answers 503.
    pub health_fail: bool,
    /// What `/metrics` claims instead of the truth.
    pub report: ReportOverrides,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            extra_latency_ms: 0,
            fail_fraction: 0.0,
            fail_status: 500,
            fail_in_stream: false,
            hang: false,
            metrics_delay_ms: 0,
            metrics_fail: false,
            metrics_garbage: GarbageMode::Off,
            health_fail: false,
            report: ReportOverrides::default(),
        }
    }
}

impl Faults {
    /// Applies a partial update; on error nothing changes.
    pub fn apply_update(&mut self, update: &Value) -> Result<(), String> {
        let Value::Object(fields) = update else { return Err("faults must be a JSON object".to_owned()) };
        let mut next = self.clone();
        for (key, value) in fields {
            match key.as_str() {
                "extra_latency_ms" => next.extra_latency_ms = bounded_u64(key, value, MAX_EXTRA_LATENCY_MS)?,
                "fail_fraction" => next.fail_fraction = fraction(key, value)?,
                "fail_status" => next.fail_status = status(key, value)?,
                "fail_in_stream" => next.fail_in_stream = boolean(key, value)?,
                "hang" => next.hang = boolean(key, value)?,
                "metrics_delay_ms" => next.metrics_delay_ms = bounded_u64(key, value, MAX_EXTRA_LATENCY_MS)?,
                "metrics_fail" => next.metrics_fail = boolean(key, value)?,
                "metrics_garbage" => next.metrics_garbage = GarbageMode::parse(value)?,
                "health_fail" => next.health_fail = boolean(key, value)?,
                "report" => apply_report(&mut next.report, value)?,
                other => return Err(format!("unknown fault {other:?}")),
            }
        }
        *self = next;
        Ok(())
    }

    /// The JSON shape `GET /sim/faults` returns (same keys the update accepts).
    pub fn to_json(&self) -> Value {
        json!({
            "extra_latency_ms": self.extra_latency_ms,
            "fail_fraction": self.fail_fraction,
            "fail_status": self.fail_status,
            "fail_in_stream": self.fail_in_stream,
            "hang": self.hang,
            "metrics_delay_ms": self.metrics_delay_ms,
            "metrics_fail": self.metrics_fail,
            "metrics_garbage": self.metrics_garbage.to_json(),
            "health_fail": self.health_fail,
            "report": {
                "waiting": report_value_json(self.report.waiting),
                "running": report_value_json(self.report.running),
                "kv_usage": report_value_json(self.report.kv_usage),
            },
        })
    }
}

fn apply_report(report: &mut ReportOverrides, value: &Value) -> Result<(), String> {
    let Value::Object(fields) = value else { return Err("report must be an object".to_owned()) };
    let fields: &Map<String, Value> = fields;
    for (key, value) in fields {
        let parsed = report_value(key, value)?;
        match key.as_str() {
            "waiting" => report.waiting = parsed,
            "running" => report.running = parsed,
            "kv_usage" => report.kv_usage = parsed,
            other => return Err(format!("unknown report field {other:?}")),
        }
    }
    Ok(())
}

/// A claimed value: a number, `null` (tell the truth), or "NaN"/"+Inf"/"-Inf" (JSON has none).
fn report_value(key: &str, value: &Value) -> Result<Option<f64>, String> {
    match value {
        Value::Null => Ok(None),
        Value::Number(number) => number.as_f64().map(Some).ok_or_else(|| format!("report.{key}: bad number")),
        Value::String(text) => match text.as_str() {
            "NaN" | "nan" => Ok(Some(f64::NAN)),
            "+Inf" | "Inf" | "inf" => Ok(Some(f64::INFINITY)),
            "-Inf" | "-inf" => Ok(Some(f64::NEG_INFINITY)),
            other => Err(format!("report.{key}: {other:?} is not a number, NaN, +Inf or -Inf")),
        },
        other => Err(format!("report.{key}: expected a number or null, got {other}")),
    }
}

fn report_value_json(value: Option<f64>) -> Value {
    match value {
        None => Value::Null,
        Some(number) if number.is_nan() => json!("NaN"),
        Some(number) if number.is_infinite() => json!(if number > 0.0 { "+Inf" } else { "-Inf" }),
        Some(number) => json!(number),
    }
}

fn boolean(key: &str, value: &Value) -> Result<bool, String> {
    value.as_bool().ok_or_else(|| format!("{key}: expected true or false"))
}

fn bounded_u64(key: &str, value: &Value, max: u64) -> Result<u64, String> {
    match value.as_u64() {
        Some(number) if number <= max => Ok(number),
        _ => Err(format!("{key}: expected an integer 0..={max}")),
    }
}

fn fraction(key: &str, value: &Value) -> Result<f64, String> {
    match value.as_f64() {
        Some(number) if (0.0..=1.0).contains(&number) => Ok(number),
        _ => Err(format!("{key}: expected a number in 0..=1")),
    }
}

fn status(key: &str, value: &Value) -> Result<u16, String> {
    match value.as_u64() {
        Some(code) if (400..=599).contains(&code) => Ok(code as u16),
        _ => Err(format!("{key}: expected an HTTP error status 400..=599")),
    }
}

#[cfg(test)]
mod tests;
