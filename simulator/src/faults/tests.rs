//! Partial updates, refusals and the JSON round trip of faults.

use super::*;

#[test]
fn partial_updates_change_only_the_given_keys() {
    let mut faults = Faults::default();
    faults.apply_update(&json!({"hang": true, "report": {"waiting": 50}})).unwrap();
    faults.apply_update(&json!({"fail_fraction": 0.5})).unwrap();
    assert!(faults.hang);
    assert_eq!(faults.fail_fraction, 0.5);
    assert_eq!(faults.report.waiting, Some(50.0));
    faults.apply_update(&json!({"report": {"waiting": null, "kv_usage": "NaN"}})).unwrap();
    assert_eq!(faults.report.waiting, None);
    assert!(faults.report.kv_usage.unwrap().is_nan());
    assert_eq!(faults.to_json()["report"]["kv_usage"], json!("NaN"));
}

#[test]
fn bad_updates_are_refused_whole() {
    let mut faults = Faults::default();
    assert!(faults.apply_update(&json!({"hang": true, "hnag": true})).is_err());
    assert!(!faults.hang, "nothing applied");
    assert!(faults.apply_update(&json!({"fail_fraction": 2})).is_err());
    assert!(faults.apply_update(&json!({"fail_status": 200})).is_err());
    assert!(faults.apply_update(&json!({"metrics_garbage": "lies"})).is_err());
    assert!(faults.apply_update(&json!([1])).is_err());
}

#[test]
fn garbage_modes_round_trip() {
    let mut faults = Faults::default();
    for (input, mode) in [
        (json!(true), GarbageMode::Text),
        (json!("negative"), GarbageMode::Negative),
        (json!("truncated"), GarbageMode::Truncated),
        (json!(false), GarbageMode::Off),
    ] {
        faults.apply_update(&json!({ "metrics_garbage": input })).unwrap();
        assert_eq!(faults.metrics_garbage, mode);
        let echoed = faults.to_json()["metrics_garbage"].clone();
        faults.apply_update(&json!({ "metrics_garbage": echoed })).unwrap();
        assert_eq!(faults.metrics_garbage, mode);
    }
}
