//! Fields read as vLLM's request models read them: pydantic models in lax mode, which take a
//! count as `8`, `8.0` or `"8"` and a flag as `true`, `1` or `"yes"`. A client's odd but
//! valid body must get the answer vLLM gives it, not a 400 only the simulator gives.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// An integer as pydantic reads one in lax mode: a JSON number with no fraction, a boolean (1
/// or 0), or a string of decimal digits (single underscores between them, as Python's `int`
/// takes) with an optional sign and a fraction of zeros, whitespace around it (Unicode's, as
/// pydantic-core trims it).
pub fn lax_int(value: &Value) -> Option<i64> {
    match value {
        Value::Number(number) => number.as_i64().or_else(|| {
            let value = number.as_f64()?;
            // Within i64 (a larger one is refused as too many either way).
            (value.fract() == 0.0 && value.abs() < 9.0e18).then_some(value as i64)
        }),
        Value::Bool(flag) => Some(i64::from(*flag)),
        Value::String(text) => {
            let text = text.trim();
            let (negative, digits) = match text.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, text.strip_prefix('+').unwrap_or(text)),
            };
            let (whole, zeros) = digits.split_once('.').unwrap_or((digits, "0"));
            let made_of = |part: &str, allowed: &[u8]| !part.is_empty() && part.bytes().all(|b| allowed.contains(&b));
            let digit_groups = || whole.split('_');
            if !digit_groups().all(|group| made_of(group, b"0123456789")) || !made_of(zeros, b"0") {
                return None;
            }
            let magnitude: i64 = digit_groups().collect::<String>().parse().ok()?;
            Some(if negative { -magnitude } else { magnitude })
        }
        _ => None,
    }
}

/// A flag as pydantic reads one in lax mode: `true` and `false`, the numbers 0 and 1, and the
/// strings `"true"`, `"t"`, `"yes"`, `"y"`, `"on"`, `"1"` and their opposites, in any case.
pub fn lax_bool(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(flag) => Some(*flag),
        Value::Number(number) => match number.as_f64()? {
            0.0 => Some(false),
            1.0 => Some(true),
            _ => None,
        },
        Value::String(text) => {
            let is = |names: &[&str]| names.iter().any(|name| text.eq_ignore_ascii_case(name));
            if is(&["true", "t", "yes", "y", "on", "1"]) {
                Some(true)
            } else if is(&["false", "f", "no", "n", "off", "0"]) {
                Some(false)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// An optional integer field (`deserialize_with`): `null` is absent, anything [`lax_int`]
/// refuses is a 400, as pydantic's error is.
pub fn int<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    optional(deserializer, lax_int, "an integer")
}

/// An optional flag field (`deserialize_with`), as [`lax_bool`] reads it.
pub fn flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    optional(deserializer, lax_bool, "a boolean")
}

/// An optional field read by `read`: `null` is absent, a value `read` refuses an error naming
/// what was `expected`.
fn optional<'de, D: Deserializer<'de>, T>(
    deserializer: D,
    read: fn(&Value) -> Option<T>,
    expected: &str,
) -> Result<Option<T>, D::Error> {
    match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => Ok(None),
        Some(value) => read(&value)
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("invalid value: {value}, expected {expected}"))),
    }
}
