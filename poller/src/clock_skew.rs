//! Peers whose clocks disagree with ours by more than [`MAX_MESSAGE_AGE_MS`]: every message
//! of theirs is refused (it cannot be placed in time, and a replay would look the same), so
//! peering with them is off. That must not pass unseen: a warning, at most once per
//! [`WARNING_INTERVAL_MS`] (a peer sends every 50 ms, one line each would flood the log),
//! naming the peer and how far apart the clocks are.

use picker::peer::MAX_MESSAGE_AGE_MS;

/// At most one warning this often, with how many refusals it stands for.
pub const WARNING_INTERVAL_MS: u64 = 60_000;

#[derive(Debug, Default)]
pub struct ClockSkewWarning {
    last_warned_ms: Option<u64>,
    /// Refusals since the last warning.
    unreported: u64,
}

impl ClockSkewWarning {
    /// A message from `replica` sent at `sent_ms` (its clock) was refused at `now_ms` (ours).
    pub fn refused(&mut self, now_ms: u64, replica: u64, sent_ms: u64) {
        self.unreported = self.unreported.saturating_add(1);
        // Either way apart: our own clock may be the one that stepped.
        let quiet = self.last_warned_ms.is_some_and(|last| now_ms.abs_diff(last) < WARNING_INTERVAL_MS);
        if quiet {
            return;
        }
        let (skew, side) = match sent_ms.checked_sub(now_ms) {
            Some(ahead) => (ahead, "ahead of"),
            None => (now_ms.saturating_sub(sent_ms), "behind"),
        };
        log::warn!(
            "wasm-epp pool service: peer replica {replica:016x}'s clock is {skew} ms {side} this replica's \
             (more than {MAX_MESSAGE_AGE_MS} ms): its messages are refused, so no decisions or load are \
             shared with it until the clocks agree ({} refused since the last warning)",
            self.unreported
        );
        self.last_warned_ms = Some(now_ms);
        self.unreported = 0;
    }

    /// Whether a warning went out at `now_ms` (for tests: the log is not captured).
    #[cfg(test)]
    fn warned_at(&self, now_ms: u64) -> bool {
        self.last_warned_ms == Some(now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_interval_whatever_the_clock_does() {
        let mut warning = ClockSkewWarning::default();
        warning.refused(100_000, 5, 130_000);
        assert!(warning.warned_at(100_000), "the first at once");
        warning.refused(100_050, 5, 130_050);
        assert!(!warning.warned_at(100_050) && warning.unreported == 1, "the next ones counted");
        warning.refused(100_000 + WARNING_INTERVAL_MS, 5, 0);
        assert!(warning.warned_at(100_000 + WARNING_INTERVAL_MS) && warning.unreported == 0);
        // Our own clock stepped back past the last warning: not silenced for the step's length.
        warning.refused(1_000, 5, 40_000);
        assert!(warning.warned_at(1_000));
    }
}
