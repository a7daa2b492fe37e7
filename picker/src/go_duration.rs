//! Durations as Go writes them (`time.ParseDuration`: `"2s"`, `"1m30s"`, `"1.5h"`, `"500ms"`),
//! the form llm-d's request TTL header (`x-llm-d-inference-ttl`) carries.

/// Nanoseconds in one of each unit Go accepts.
const UNITS_NS: [(&str, f64); 8] =
    [("ns", 1.0), ("us", 1e3), ("µs", 1e3), ("μs", 1e3), ("ms", 1e6), ("s", 1e9), ("m", 60e9), ("h", 3_600e9)];

/// Go's durations are whole nanoseconds in an `i64`: longer is an error there.
const MAX_GO_NS: f64 = i64::MAX as f64;

/// The positive duration `text` names, in whole milliseconds (rounded up, so any duration of
/// at least 1 ns is at least 1 ms); `None` when Go would not read it, or it is under 1 ns (Go
/// truncates to whole ns: zero) or negative. Surrounding white space is ignored.
pub fn positive_duration_ms(text: &str) -> Option<u64> {
    let mut rest = text.trim();
    if let Some(unsigned) = rest.strip_prefix('+') {
        rest = unsigned;
    }
    if rest.is_empty() || rest.starts_with('-') {
        return None;
    }
    let mut total_ns = 0.0_f64;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        if number.is_empty() || number == "." {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        // The longest unit that starts the tail ("ms" before "m").
        let (unit, per_ns) =
            UNITS_NS.iter().filter(|(unit, _)| tail.starts_with(unit)).max_by_key(|(unit, _)| unit.len())?;
        // Go truncates each component to whole nanoseconds before adding them up.
        total_ns += (value * per_ns).trunc();
        rest = tail.get(unit.len()..)?;
    }
    if !total_ns.is_finite() || !(1.0..=MAX_GO_NS).contains(&total_ns) {
        return None;
    }
    Some((total_ns / 1e6).ceil() as u64)
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
            ("1ns", 1),
            ("2562047h", 9_223_369_200_000),
            ("1h2m3s4ms", 3_723_004),
            (".5s", 500),
        ] {
            assert_eq!(positive_duration_ms(text), Some(ms), "{text}");
        }
    }

    #[test]
    fn what_go_refuses_or_is_not_positive_is_none() {
        let refused =
            ["", " ", "soon", "2", "-2s", "0s", "0", "2x", "s", "1.2.3s", "2s3", "0.4ns", "0.5ns0.5ns", "2562048h"];
        for text in refused {
            assert_eq!(positive_duration_ms(text), None, "{text:?}");
        }
    }
}
