//! docs/configuration.md's field tables against the parser: every documented field exists
//! with the documented default and bounds, and every field the parser accepts is documented.
//!
//! Each table row `| `field` | default | bounds | meaning |` is read; the default is set
//! explicitly and must parse to the same configuration as leaving it out; numeric bounds
//! `a..=b` (or `≥ a`) must be accepted at both ends and refused just outside them, by the
//! parser or by `validate`, whose error then names the field.

// Test support: a table row without its columns, or a failed unwrap, is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use picker::config::{parse_json, FilterConfig, PollerConfig};
use picker::discovery::KubernetesConfig;
use serde_json::{json, Value};

const DOC: &str = include_str!("../../docs/configuration.md");

/// Which configuration a table documents, and where its fields sit in it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Table {
    /// The filter's tables: fields named by their full dotted path.
    Filter,
    /// The singleton's own fields.
    Singleton,
    /// The singleton's `peers` section.
    Peers,
    /// The `kubernetes` section.
    Kubernetes,
}

struct Row {
    table: Table,
    field: String,
    default: String,
    bounds: String,
}

fn table_of(heading: &str) -> Option<Table> {
    let heading = heading.trim_start_matches('#').trim();
    let table = match heading {
        h if h.starts_with("Filter") => Table::Filter,
        h if h.starts_with("Flow control") || h.starts_with("Learning") => Table::Filter,
        h if h.starts_with("Comparing") || h.starts_with("Prefill/decode") => Table::Filter,
        h if h.starts_with("Singleton") => Table::Singleton,
        h if h.starts_with("Peers") => Table::Peers,
        h if h.starts_with("Kubernetes discovery") => Table::Kubernetes,
        _ => return None,
    };
    Some(table)
}

fn rows() -> Vec<Row> {
    let mut rows = Vec::new();
    let mut table = None;
    let mut in_table = false;
    for line in DOC.lines() {
        if line.starts_with('#') {
            table = table_of(line);
            in_table = false;
        } else if line.starts_with("| field | default | bounds |") {
            in_table = true;
        } else if !line.starts_with('|') {
            in_table = false;
        } else if let (true, Some(table), Some(rest)) = (in_table, table, line.strip_prefix("| `")) {
            let columns: Vec<&str> = rest.split(" | ").collect();
            let field = columns[0].trim_end_matches('`').to_string();
            rows.push(Row {
                table,
                field,
                default: columns[1].trim().to_string(),
                bounds: columns[2].trim().to_string(),
            });
        }
    }
    assert!(rows.len() > 100, "the tables were not found: {} rows", rows.len());
    rows
}

/// The smallest valid configuration of each table, to which one field is added.
fn base(table: Table) -> Value {
    match table {
        Table::Filter => json!({}),
        Table::Singleton => json!({"pool": ["10.0.0.1:8000"]}),
        Table::Peers => json!({"pool": ["10.0.0.1:8000"],
                               "peers": {"peers": ["10.0.0.9:8081"], "secret": "a-shared-secret-of-some-length"}}),
        Table::Kubernetes => json!({"namespace": "llm", "label_selector": "app=vllm", "target_port": 8000}),
    }
}

/// `base` with `field` (a dotted path below the table's section) set to `value`.
fn with(table: Table, field: &str, value: Value) -> Value {
    let mut config = base(table);
    set(table, &mut config, field, value);
    config
}

fn set(table: Table, config: &mut Value, field: &str, value: Value) {
    let mut at = if table == Table::Peers { &mut config["peers"] } else { config };
    let mut parts = field.split('.').peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            at[part] = value;
            break;
        }
        if at.get(part).is_none() {
            at[part] = json!({});
        }
        at = &mut at[part];
    }
}

/// Parses, and validates when asked; `Err` with the parser's or the validation's message.
fn check_with(table: Table, config: &Value, validate: bool) -> Result<String, String> {
    let bytes = config.to_string();
    match table {
        Table::Filter => parse_json::<FilterConfig>(bytes.as_bytes()).and_then(|c| {
            if validate {
                c.validate().map(|_| format!("{c:?}"))
            } else {
                Ok(format!("{c:?}"))
            }
        }),
        Table::Singleton | Table::Peers => parse_json::<PollerConfig>(bytes.as_bytes()).and_then(|c| {
            if validate {
                c.validate().map(|_| format!("{c:?}"))
            } else {
                Ok(format!("{c:?}"))
            }
        }),
        Table::Kubernetes => parse_json::<KubernetesConfig>(bytes.as_bytes()).and_then(|c| {
            if validate {
                c.validate().map(|_| format!("{c:?}"))
            } else {
                Ok(format!("{c:?}"))
            }
        }),
    }
}

fn check(table: Table, config: &Value) -> Result<String, String> {
    check_with(table, config, true)
}

/// `value` at the dotted `path` of an empty configuration (parsed only: no base fields).
fn alone(table: Table, path: &str, value: Value) -> Value {
    let mut section = value;
    for part in path.split('.').rev().filter(|part| !part.is_empty()) {
        section = json!({ part: section });
    }
    if table == Table::Peers {
        json!({ "peers": section })
    } else {
        section
    }
}

/// The documented default as JSON, when the column holds one value.
fn documented_default(text: &str) -> Option<Value> {
    let text = text.trim();
    if let Some(quoted) = text.strip_prefix('`') {
        let value = &quoted[..quoted.find('`')?];
        if value.contains('…') {
            return None;
        }
        return Some(serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string())));
    }
    if text == "none" {
        return Some(Value::Null);
    }
    // `queue 2, kv_cache 0, inflight 2, prefix 3`: a weights object.
    if text.contains(", ") && !text.contains('(') {
        let mut object = serde_json::Map::new();
        for pair in text.split(", ") {
            let (name, number) = pair.split_once(' ')?;
            object.insert(name.to_string(), serde_json::from_str(number).ok()?);
        }
        return Some(Value::Object(object));
    }
    let first = text.split_whitespace().next()?;
    serde_json::from_str(first).ok()
}

fn number(text: &str) -> Option<f64> {
    let text = text.trim().trim_matches('`');
    let (digits, unit) = match text.split_once(' ') {
        Some((digits, unit)) => (digits, unit),
        None => (text, ""),
    };
    let scale = match unit {
        "" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let value: f64 = match digits.strip_suffix("⁹") {
        Some(base) => base.parse::<f64>().ok()?.powi(9),
        None => digits.parse().ok()?,
    };
    Some(value * scale)
}

/// `(min, max)` of bounds written `a..=b` (possibly followed by `;` and more) or `≥ a`.
fn documented_range(bounds: &str) -> Option<(f64, Option<f64>)> {
    let head = bounds.split([';', ',', '(']).next()?.trim();
    if let Some(min) = head.strip_prefix("≥ ") {
        return Some((number(min)?, None));
    }
    let (min, max) = head.split_once("..=")?;
    Some((number(min)?, Some(number(max)?)))
}

/// `1.5`, not `1..=8`.
fn has_fraction(text: &str) -> bool {
    text.as_bytes().windows(3).any(|w| w[0].is_ascii_digit() && w[1] == b'.' && w[2].is_ascii_digit())
}

fn as_json(value: f64, integer: bool) -> Value {
    if integer {
        json!(value as i64)
    } else {
        json!(value)
    }
}

/// Fields whose documented bounds depend on this one's, set to let this one reach its own
/// bounds (the dependent bound is tested where it is documented).
fn companions(table: Table, field: &str) -> Vec<(&'static str, Value)> {
    match (table, field) {
        (Table::Filter, "max_body_bytes") => vec![("max_buffered_bytes", json!(1u64 << 34))],
        (Table::Filter, "outlier_detection.base_ejection_ms") => {
            vec![("outlier_detection.max_ejection_ms", json!(86_400_000))]
        }
        (Table::Singleton, "poll_interval_ms") => vec![("models_interval_ms", json!(0))],
        (Table::Peers, "send_interval_ms") => vec![("heartbeat_ms", json!(1_000))],
        _ => Vec::new(),
    }
}

#[test]
fn documented_defaults_are_the_parser_s() {
    let mut problems = Vec::new();
    for row in rows() {
        let Some(value) = documented_default(&row.default) else { continue };
        // Parsed only: a default such as an empty pool is valid alone in no configuration.
        let unset = match row.field.rsplit_once('.') {
            Some((parent, _)) => alone(row.table, parent, json!({})),
            None => alone(row.table, "", json!({})),
        };
        let set = alone(row.table, &row.field, value.clone());
        match (check_with(row.table, &set, false), check_with(row.table, &unset, false)) {
            (Ok(set), Ok(unset)) if set == unset => {}
            (set, unset) => problems.push(format!(
                "{:?} {}: the documented default {value} is not the parser's:\n  set:   {set:?}\n  unset: {unset:?}",
                row.table, row.field
            )),
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn documented_bounds_are_the_parser_s() {
    let mut problems = Vec::new();
    for row in rows() {
        let Some((min, max)) = documented_range(&row.bounds) else { continue };
        let integer = !has_fraction(&row.default) && !has_fraction(&row.bounds);
        let step = if integer { 1.0 } else { 0.5 };
        let leaf = row.field.rsplit('.').next().unwrap_or(&row.field);
        let mut expect = |value: f64, accepted: bool| {
            let mut config = with(row.table, &row.field, as_json(value, integer));
            for (field, companion) in companions(row.table, &row.field) {
                set(row.table, &mut config, field, companion);
            }
            match (check(row.table, &config), accepted) {
                (Ok(_), true) => {}
                // Refused by the parser (a negative unsigned) or by validate, naming the field.
                (Err(e), false) if e.contains(leaf) => {}
                (result, _) => problems.push(format!(
                    "{:?} {} = {value}: documented {}, got {}",
                    row.table,
                    row.field,
                    if accepted { "accepted" } else { "refused, naming the field" },
                    result.map_or_else(|e| e, |_| "accepted".into())
                )),
            }
        };
        expect(min, true);
        expect(min - step, false);
        if let Some(max) = max {
            expect(max, true);
            expect(max + step, false);
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The fields serde lists for an object at `path` (from its unknown-field error).
fn accepted_fields(table: Table, path: &str) -> Vec<String> {
    let config = if path.is_empty() {
        let mut config = base(table);
        let at = if table == Table::Peers { &mut config["peers"] } else { &mut config };
        at["__not_a_field"] = json!(1);
        config
    } else {
        with(table, &format!("{path}.__not_a_field"), json!(1))
    };
    let error = check(table, &config).unwrap_err();
    let list = match error.split_once("expected one of ") {
        Some((_, list)) => list.to_string(),
        // Two fields: "expected `a` or `b`".
        None => error
            .split_once(", expected ")
            .map(|(_, l)| l.replace(" or ", ", "))
            .unwrap_or_else(|| panic!("{path}: {error}")),
    };
    let list = list.split(" at line").next().unwrap_or(&list);
    list.split(", ").map(|f| f.trim_matches('`').to_string()).collect()
}

#[test]
fn every_field_the_parser_accepts_is_documented() {
    let rows = rows();
    let documented = |table: Table, field: &str| rows.iter().any(|r| r.table == table && r.field == field);
    let sections = [
        (Table::Filter, ""),
        (Table::Filter, "weights"),
        (Table::Filter, "saturation"),
        (Table::Filter, "prefix"),
        (Table::Filter, "flow_control"),
        (Table::Filter, "learning"),
        (Table::Filter, "models"),
        (Table::Filter, "comparison"),
        (Table::Filter, "outlier_detection"),
        (Table::Filter, "pd"),
        (Table::Singleton, ""),
        (Table::Peers, ""),
        (Table::Kubernetes, ""),
    ];
    let mut missing = Vec::new();
    for (table, section) in sections {
        for field in accepted_fields(table, section) {
            let path = if section.is_empty() { field } else { format!("{section}.{field}") };
            // A section documented whole (`comparison`) or by its fields (`prefix.*`).
            let has_fields = rows.iter().any(|r| r.table == table && r.field.starts_with(&format!("{path}.")));
            if !documented(table, &path) && !has_fields {
                missing.push(format!("{table:?} {path}"));
            }
        }
    }
    assert!(missing.is_empty(), "accepted but not documented: {missing:?}");
}
