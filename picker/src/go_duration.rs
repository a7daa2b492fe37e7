//! Durations as Go writes them (`time.ParseDuration`: `"2s"`, `"1m30s"`, `"1.5h"`, `"500ms"`),
//! the form llm-d's request TTL header (`x-llm-d-inference-ttl`) carries.

/// Milliseconds in one of each unit Go accepts.
const UNITS_MS: [(&str, f64); 8] =
    [("ns", 1e-6), ("us", 1e-3), ("µs", 1e-3), ("μs", 1e-3), ("ms", 1.0), ("s", 1e3), ("m", 60e3), ("h", 3_600e3)];

/// The positive duration `text` names, in whole milliseconds (a fraction rounds up, so any
/// positive duration is at least 1 ms); `None` when it does not read as a Go duration, or is
/// zero or negative. Surrounding white space is ignored.
pub fn positive_duration_ms(text: &str) -> Option<u64> {
    let mut rest = text.trim();
    if let Some(unsigned) = rest.strip_prefix('+') {
        rest = unsigned;
    }
    if rest.is_empty() || rest.starts_with('-') {
        return None;
    }
    let mut total_ms = 0.0_f64;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        if number.is_empty() || number == "." {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        // The longest unit that starts the tail ("ms" before "m").
        let (unit, per_ms) =
            UNITS_MS.iter().filter(|(unit, _)| tail.starts_with(unit)).max_by_key(|(unit, _)| unit.len())?;
        total_ms += value * per_ms;
        rest = tail.get(unit.len()..)?;
    }
    if !total_ms.is_finite() || total_ms <= 0.0 || total_ms > u64::MAX as f64 {
        return None;
    }
    Some(total_ms.ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_read_as_milliseconds() {
        for (text, ms) in [
            ("2s", 2_000),
            (" 2s ", 2_000),
            ("500ms", 500),
            ("1m30s", 90_000),
            ("1.5h", 5_400_000),
            ("+3m", 180_000),
            ("250us", 1),
            ("1h2m3s4ms", 3_723_004),
            (".5s", 500),
        ] {
            assert_eq!(positive_duration_ms(text), Some(ms), "{text}");
        }
    }

    #[test]
    fn what_go_refuses_or_is_not_positive_is_none() {
        for text in ["", " ", "soon", "2", "-2s", "0s", "0", "2x", "s", "1.2.3s", "2s3", "999999999999999999999999h"] {
            assert_eq!(positive_duration_ms(text), None, "{text:?}");
        }
    }
}
