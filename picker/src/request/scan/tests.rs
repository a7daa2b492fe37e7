use super::*;

/// The scanner's verdict on `text` as a whole value: valid and ending at its end.
fn accepts(text: &str) -> bool {
    value_end(text.as_bytes(), 0) == Some(text.len())
}

#[test]
fn accepts_what_serde_accepts() {
    for text in [
        r#""""#,
        r#""a\"b\\c\/\b\f\n\r\t\u00e9\uD83D\uDE00 end""#,
        "0",
        "-0.5e+10",
        "12E-3",
        "true",
        "false",
        "null",
        "[]",
        "{}",
        "[ 1 , \"two\" , [ ] , { } , {\"a\" : [null]} ]",
        "{\"k\":{\"k\":{\"k\":[1,2,{\"x\":\"y\"}]}}}",
        "\"text of thirty-two bytes or more, long enough for two words a step\"",
    ] {
        assert!(accepts(text), "{text}");
        assert!(serde_json::from_str::<serde_json::Value>(text).is_ok(), "{text}");
    }
}

#[test]
fn refuses_what_serde_refuses() {
    for text in [
        "\"unterminated",
        "\"bad \\x escape\"",
        "\"short \\u12\"",
        "\"tab\tinside\"",
        "\"line\nbreak inside a string longer than sixteen bytes\"",
        "01",
        "-",
        "1.",
        "1e",
        ".5",
        "tru",
        "nul",
        "[1,]",
        "[,1]",
        "{\"a\"}",
        "{\"a\":1,}",
        "{1:2}",
        "[1 2]",
        "{\"a\":1]",
        "[1}",
        "+1",
    ] {
        assert!(!accepts(text), "{text}");
        assert!(serde_json::from_str::<serde_json::Value>(text).is_err(), "{text}");
    }
}

#[test]
fn a_value_ends_where_its_last_byte_is() {
    let text = b"{\"a\": [1, {\"b\": \"}\"}]} , 7";
    assert_eq!(value_end(text, 0), Some(22));
    assert_eq!(value_end(b"123 ", 0), Some(3));
    assert_eq!(value_end(b"\"q\"x", 0), Some(3));
}

#[test]
fn any_depth_is_scanned_without_stack() {
    for depth in [127, 128, 129, 256, 257, 10_000] {
        let arrays = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        assert!(accepts(&arrays), "{depth}");
        let objects = format!("{}1{}", "{\"k\":".repeat(depth), "}".repeat(depth));
        assert!(accepts(&objects), "{depth}");
        // Closing with the wrong bracket at any depth is seen, past a spill as well.
        let wrong = format!("{}1}}{}", "[".repeat(depth), "]".repeat(depth - 1));
        assert!(!accepts(&wrong), "{depth}");
        let mixed: String = (0..depth).map(|i| if i % 3 == 0 { "{\"a\":" } else { "[" }).collect();
        let closed: String = (0..depth).rev().map(|i| if i % 3 == 0 { "}" } else { "]" }).collect();
        assert!(accepts(&format!("{mixed}null{closed}")), "{depth}");
        assert!(!accepts(&format!("{mixed}null{}", &closed[1..])), "{depth}");
    }
    assert!(!accepts(&"[".repeat(1_000_000)));
}

#[test]
fn every_stop_is_found_at_every_offset_of_a_step() {
    // A quote, backslash or control byte at each position of the 16-byte step and of the tail.
    for len in 0..40 {
        let plain = "x".repeat(len);
        assert!(accepts(&format!("\"{plain}\"")), "{len}");
        assert!(accepts(&format!("\"{plain}\\n{plain}\"")), "{len}");
        assert!(!accepts(&format!("\"{plain}\u{1}{plain}\"")), "{len}");
        assert!(!accepts(&format!("\"{plain}")), "{len}");
    }
}

#[test]
fn utf8_text_passes_through_strings() {
    // Bytes of 0x80 and above are never stops (the text is already known to be UTF-8).
    assert!(accepts("\"héllo wörld, ünïcode text of some length: 日本語のテキスト\""));
}

/// The scanner and serde_json agree, both ways, on every mutant of a few documents (a byte
/// replaced, removed or doubled with one of the characters JSON's grammar turns on): the
/// scanner accepts exactly what serde accepts as one value.
#[test]
fn agrees_with_serde_on_every_mutant() {
    let documents = [
        r#"{"a": [1, -2.5e3, true, false, null], "b": {"c": "d\"e\\f\u00e9\n"}, "g": []}"#,
        r#"[{"k":"a string of some length with a \"quote\" and C:\\path in it"},{},[[]]]"#,
        r#"{"num": 0.0, "exp": 1E+2, "neg": -0, "s": "\t\r\b\f\/"}"#,
    ];
    let specials = b"[]{}\",:\\ \n\ttfnu0-+.eE1\x01";
    let mut checked = 0;
    for document in documents {
        let base = document.as_bytes();
        assert!(accepts(document));
        for at in 0..base.len() {
            let mut mutants = vec![[&base[..at], &base[at + 1..]].concat()];
            for &special in specials {
                mutants.push([&base[..at], &[special], &base[at + 1..]].concat());
                mutants.push([&base[..at], &[special], &base[at..]].concat());
            }
            for mutant in mutants {
                let Ok(text) = std::str::from_utf8(&mutant) else { continue };
                let serde = serde_json::from_str::<&serde_json::value::RawValue>(text).is_ok();
                let ours = skip_white_space(text.as_bytes(), 0);
                let ours = value_end(text.as_bytes(), ours)
                    .is_some_and(|end| skip_white_space(text.as_bytes(), end) == text.len());
                assert_eq!(ours, serde, "{text}");
                checked += 1;
            }
        }
    }
    assert!(checked > 3_000, "{checked}");
}
