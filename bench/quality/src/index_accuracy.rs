//! The prefix index's accuracy (issue 14), read from wasm-epp's own learning stats at the end
//! of a run with `learning.enabled`: cached prompt tokens it predicted for the pods it picked,
//! against the cached tokens those pods reported in `usage`. Nobody else publishes this figure. Also the picks by reason, for every
//! wasm-epp target.

use std::time::Duration;

use crate::targets::RunningTarget;

/// The filter flushes its stats on its tick (20 ms); this leaves it several.
const FLUSH_WAIT: Duration = Duration::from_millis(300);

/// Prints the picks by reason for a wasm-epp target, and the accuracy line if it learned
/// (nothing for other targets).
pub fn print(running: &RunningTarget) {
    let RunningTarget::WasmEpp(envoy) = running else { return };
    std::thread::sleep(FLUSH_WAIT);
    let stat = |name: &str| envoy.stat(name).unwrap_or(0.0);
    // Why each request went where it did: affinity kept, or load decided (affinity released
    // or none): the first thing to read when a target's hit rate moves.
    let reasons: Vec<String> = ["affinity", "session", "load", "fail_open", "shed"]
        .iter()
        .map(|reason| (reason, stat(&format!("wasm_epp_picks_by_reason{{reason=\"{reason}\"}}"))))
        .filter(|(_, count)| *count > 0.0)
        .map(|(reason, count)| format!("{reason} {count:.0}"))
        .collect();
    println!("  picks by reason: {}", reasons.join(", "));
    let answers = stat("wasm_epp_learning_cached_reports");
    if answers <= 0.0 {
        return;
    }
    let (predicted, reported) =
        (stat("wasm_epp_learning_cached_tokens_predicted"), stat("wasm_epp_learning_cached_tokens_reported"));
    let error = stat("wasm_epp_learning_cached_tokens_error");
    println!(
        "  index accuracy: {answers:.0} answers, cached tokens predicted {predicted:.0} vs reported {reported:.0} \
         (total {:+.1}%), mean |error| {:.1}% of reported",
        100.0 * (predicted - reported) / reported.max(1.0),
        100.0 * error / reported.max(1.0),
    );
}
