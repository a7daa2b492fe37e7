//! The prefix index's accuracy (issue 14), read from wasm-epp's own learning stats at the end
//! of a run with `learning.enabled`: cached prompt tokens it predicted for the pods it picked,
//! against the cached tokens those pods reported in `usage`. Nobody else publishes this figure.

use std::time::Duration;

use crate::targets::RunningTarget;

/// The filter flushes its stats on its tick (20 ms); this leaves it several.
const FLUSH_WAIT: Duration = Duration::from_millis(300);

/// Prints the accuracy line for a wasm-epp target that learned (nothing for other targets).
pub fn print(running: &RunningTarget) {
    let RunningTarget::WasmEpp(envoy) = running else { return };
    std::thread::sleep(FLUSH_WAIT);
    let stat = |name: &str| envoy.stat(name).unwrap_or(0.0);
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
