use super::*;

fn model(body: &str) -> Result<Option<String>, Unreadable> {
    read_model(body.as_bytes()).map(|m| m.map(Cow::into_owned))
}

#[test]
fn reads_the_top_level_model_as_serde_does_for_plain_json() {
    for body in [
        r#"{"model":"m","prompt":"hi"}"#,
        r#" { "prompt" : [1, 2, {"model": "inner"}] , "model" : "m" } "#,
        r#"{"metadata":{"model":"inner"},"prompt":"\"model\":\"x\""}"#,
        r#"{"model":"a\u002fb\n","input":"x"}"#,
        r#"{"model":null}"#,
        r#"{}"#,
        r#"{"n":-1.5e-7,"b":true,"f":false,"z":null,"s":"","l":[],"o":{}}"#,
    ] {
        let serde: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(model(body).unwrap().as_deref(), serde["model"].as_str(), "{body}");
    }
}

#[test]
fn reads_what_python_reads_and_serde_refuses() {
    let python = [
        ("\u{feff}{\"model\":\"m\"}", "a UTF-8 byte order mark"),
        (r#"{"model":"first","prompt":"x","model":"m"}"#, "a key twice: the last is kept"),
        (r#"{"mod\u0065l":"m"}"#, "an escaped key"),
        (r#"{"model":"m","temperature":NaN,"top_p":Infinity,"x":-Infinity}"#, "Python's constants"),
        (r#"{"logit_bias":{"1":NaN},"model":"m"}"#, "a constant inside a value"),
        (r#"{"model":"m","x":1e400,"seed":123456789012345678901234567890}"#, "numbers past f64 and u64"),
        (r#"{"model":"m","stream":"true","prompt_embeds":"AAAA"}"#, "values pydantic converts"),
    ];
    for (body, why) in python {
        assert_eq!(model(body).unwrap().as_deref(), Some("m"), "{why}");
    }
}

#[test]
fn finds_the_value_as_written() {
    let body = r#"{"model" :  "public" ,"x":1,"model": "m"}"#;
    let place = find_model(body.as_bytes()).unwrap();
    assert_eq!(body.get(place.value.unwrap()), Some("\"m\""));
    assert_eq!((place.members_start, place.empty), (1, false));
    let none = find_model(b"\xEF\xBB\xBF  {}").unwrap();
    assert_eq!((none.value, none.members_start, none.empty), (None, 6, true));
}

#[test]
fn refuses_what_has_no_readable_model() {
    for body in [
        &b""[..],
        b"model=m&prompt=x",
        b"[{\"model\":\"m\"}]",
        b"\"model\"",
        b"{\"model\":\"m\",\"prompt\":\"cut",
        b"{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}",
        b"{\"model\":\"m\"} trailing",
        b"{\"model\":\"m\",}",
        b"{\"model\"}",
        b"{\"model\":}",
        b"{model:\"m\"}",
        b"{\"model\":\"m\",\"x\":\"\xff\"}",
        b"{\"model\":\"tab\tinside\"}",
        b"\xEF\xBB\xBF\xEF\xBB\xBF{}",
    ] {
        assert_eq!(find_model(body), Err(Unreadable::NotAnObject), "{}", String::from_utf8_lossy(body));
    }
    for body in [r#"{"model":7}"#, r#"{"model":["m"]}"#, r#"{"model":"\ud800"}"#] {
        assert_eq!(model(body), Err(Unreadable::ModelNotText), "{body}");
    }
}

#[test]
fn deep_values_cost_no_stack() {
    let deep = format!("{{\"prompt\":{}{},\"model\":\"m\"}}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(model(&deep).unwrap().as_deref(), Some("m"));
}
