//! `find_model`, `read_model` and `rewrite_body` on arbitrary bodies: never panic; on a body
//! serde_json reads as an object, the model read is the one serde keeps (the last of a key given
//! twice, as Python's reader), and a rewrite changes that value and nothing else (the rewritten
//! body reads as the same object with the new model).

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::models::rewrite::rewrite_body;
use picker::request::read_model;
use serde_json::{Map, Value};

fuzz_target!(|body: &[u8]| {
    let read = read_model(body);
    let rewritten = rewrite_body(body, "new \"model\"\n");
    let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(body) else { return };
    let expected = object.get("model").cloned();
    match (&read, &expected) {
        (Ok(Some(name)), Some(Value::String(serde_name))) => assert_eq!(name.as_ref(), serde_name, "model read"),
        (Ok(None), None | Some(Value::Null)) | (Err(_), Some(_)) => {}
        other => panic!("read {other:?} for a body serde reads"),
    }
    let Some(rewritten) = rewritten else { panic!("no rewrite of a body serde reads as an object") };
    let again: Map<String, Value> = serde_json::from_slice(&rewritten).expect("the rewritten body reads");
    object.insert("model".into(), Value::String("new \"model\"\n".into()));
    assert_eq!(again, object, "a rewrite changed more than the model");
});
