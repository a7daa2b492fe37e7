//! One sample line of the Prometheus text exposition format, parsed without allocating.
//!
//! `name{label="value",...} value [timestamp]`. Escaped quotes inside label values are
//! honoured; anything malformed yields `None` and the line is skipped.

use std::borrow::Cow;

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Labels kept for [`Sample::label`] lookups at most; vLLM's widest info series has about a
/// dozen. Labels past it are still part of the series' key ([`Sample::series_key`]).
const MAX_LABELS: usize = 32;

#[derive(Debug, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    labels: [(&'a str, &'a str); MAX_LABELS],
    label_count: usize,
    /// The sum of every label's own hash, those past [`MAX_LABELS`] too: two series that
    /// differ only in their 33rd label are two series, not a repeat of one.
    label_set_hash: u64,
    pub value: f64,
}

impl<'a> Sample<'a> {
    /// A label's raw value, escapes left as written: for values that have none (numbers,
    /// fixed words such as `level`).
    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.labels.iter().take(self.label_count).find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    /// A label's value as the exporter was given it: the text format's escapes (`\\`, `\"`,
    /// `\n`) undone, for names (models, adapters) that requests name unescaped. Borrowed
    /// unless it holds a backslash.
    pub fn label_text(&self, key: &str) -> Option<Cow<'a, str>> {
        self.label(key).map(unescape)
    }

    /// A key for the series: its name and label set, whatever the labels' order (values as
    /// written, escapes and all). Two samples of one series in one page share it; 64 bits of
    /// xxh3, so two different series collide about once in 2^64 pairs. Every label counts,
    /// however many the line has. No allocation.
    pub fn series_key(&self) -> u64 {
        xxh3_64_with_seed(self.name.as_bytes(), self.label_set_hash)
    }
}

/// One label's share of [`Sample::label_set_hash`]: the label sets' hashes are sums of these,
/// so the order labels were written in does not count, and a value stays with its key.
fn label_hash(key: &str, value: &str) -> u64 {
    xxh3_64_with_seed(value.as_bytes(), xxh3_64(key.as_bytes()))
}

/// Undoes the text format's label escapes; any other backslash is kept as written, as
/// Prometheus' own parser does.
fn unescape(raw: &str) -> Cow<'_, str> {
    if !raw.contains('\\') {
        return Cow::Borrowed(raw);
    }
    let mut text = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            text.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => text.push('\n'),
            Some(escaped @ ('\\' | '"')) => text.push(escaped),
            Some(other) => {
                text.push('\\');
                text.push(other);
            }
            None => text.push('\\'),
        }
    }
    Cow::Owned(text)
}

/// The metric name at the start of a sample line (up to `{` or white space).
pub fn sample_name(line: &str) -> &str {
    let end = line.bytes().position(|b| b == b'{' || b == b' ' || b == b'\t').unwrap_or(line.len());
    line.get(..end).unwrap_or(line)
}

pub fn parse_sample(line: &str) -> Option<Sample<'_>> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = line.get(..name_end)?;
    if name.is_empty() {
        return None;
    }
    let mut sample = Sample { name, labels: [("", ""); MAX_LABELS], label_count: 0, label_set_hash: 0, value: 0.0 };
    let mut rest = line.get(name_end..)?;
    if let Some(after_brace) = rest.strip_prefix('{') {
        rest = parse_labels(after_brace, &mut sample)?;
    }
    let value_text = rest.split_whitespace().next()?;
    sample.value = parse_value(value_text)?;
    Some(sample)
}

/// Parses `k="v",...}` and returns the text after the closing brace.
fn parse_labels<'a>(mut text: &'a str, sample: &mut Sample<'a>) -> Option<&'a str> {
    loop {
        text = text.trim_start_matches([' ', ',']);
        if let Some(after) = text.strip_prefix('}') {
            return Some(after);
        }
        let eq = text.find('=')?;
        let key = text.get(..eq)?.trim();
        let quoted = text.get(eq + 1..)?.strip_prefix('"')?;
        let close = closing_quote(quoted)?;
        let value = quoted.get(..close)?;
        sample.label_set_hash = sample.label_set_hash.wrapping_add(label_hash(key, value));
        if let Some(slot) = sample.labels.get_mut(sample.label_count) {
            *slot = (key, value);
            sample.label_count += 1;
        }
        text = quoted.get(close + 1..)?;
    }
}

fn closing_quote(text: &str) -> Option<usize> {
    let mut escaped = false;
    for (index, byte) in text.bytes().enumerate() {
        match byte {
            b'\\' if !escaped => escaped = true,
            b'"' if !escaped => return Some(index),
            _ => escaped = false,
        }
    }
    None
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        other => other.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_labels_values() {
        let s = parse_sample(r#"vllm:x{a="1",b="q\"uote",c="" } 2.5 1700000000"#).unwrap();
        assert_eq!((s.name, s.value), ("vllm:x", 2.5));
        assert_eq!(
            (s.label("a"), s.label("b"), s.label("c"), s.label("d")),
            (Some("1"), Some(r#"q\"uote"#), Some(""), None)
        );
        assert_eq!(parse_sample("plain 3").unwrap().value, 3.0);
    }

    #[test]
    fn label_text_undoes_the_formats_escapes_only() {
        let s = parse_sample(r#"x{a="q\"d\\b\nc",b="C:\d",c="plain"} 1"#).unwrap();
        assert_eq!(s.label_text("a").as_deref(), Some("q\"d\\b\nc"));
        assert_eq!(s.label_text("b").as_deref(), Some(r"C:\d"), "an unknown escape is kept as written");
        assert!(matches!(s.label_text("c"), Some(Cow::Borrowed("plain"))), "no copy without a backslash");
    }

    #[test]
    fn a_series_key_is_its_name_and_label_set_in_any_order() {
        let key = |line| parse_sample(line).unwrap().series_key();
        assert_eq!(key(r#"w{a="1",b="2"} 3"#), key(r#"w{b="2",a="1"} 4"#));
        assert_ne!(key(r#"w{a="1",b="2"} 3"#), key(r#"w{a="2",b="1"} 3"#), "values stay with their keys");
        assert_ne!(key(r#"w{a="1"} 3"#), key(r#"v{a="1"} 3"#));
        assert_ne!(key(r#"w{a="1"} 3"#), key("w 3"));
        assert_ne!(key(r#"w{engine="0"} 3"#), key(r#"w{engine="1"} 3"#));
    }

    #[test]
    fn a_series_key_covers_labels_past_the_kept_ones() {
        let line = |last: &str| {
            let labels: Vec<String> = (0..MAX_LABELS).map(|i| format!("l{i}=\"v\"")).collect();
            format!("w{{{},last=\"{last}\"}} 1", labels.join(","))
        };
        let (first, second) = (line("a"), line("b"));
        let key = |line: &str| parse_sample(line).unwrap().series_key();
        assert_ne!(key(&first), key(&second), "they differ only in the label past the {MAX_LABELS} kept");
        assert_eq!(parse_sample(&first).unwrap().label("last"), None, "which no lookup reads");
    }

    #[test]
    fn rejects_broken_lines() {
        for bad in ["x{a=\"1\" 2", "x{a=1} 2", "x", "x{} notanumber", "{a=\"b\"} 1"] {
            assert!(parse_sample(bad).is_none(), "{bad}");
        }
    }
}
