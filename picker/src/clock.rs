//! The host's clock is the wall clock: NTP or a restored VM can step it back. Schedules and
//! expiries compare their stamps with it here, one way, so a step back neither stops work for
//! its length nor keeps alive what should have expired.

/// A deadline `due_ms` not reached yet: still to wait. One further ahead than `interval_ms`
/// (the most it is ever set ahead) was set before the clock stepped back, and is due now.
pub fn not_due_yet(now_ms: u64, due_ms: u64, interval_ms: u64) -> bool {
    now_ms < due_ms && due_ms - now_ms <= interval_ms
}

/// A stamp taken within the last `span_ms`. One later than now was taken before the clock
/// stepped back: not recent (what it stamps, a call in flight, is forgotten).
pub fn within_last(now_ms: u64, stamp_ms: u64, span_ms: u64) -> bool {
    stamp_ms <= now_ms && now_ms - stamp_ms <= span_ms
}

/// [`within_last`] of a stamp another thread took: its clock may be read a little after this
/// one's, so a stamp up to `skew_ms` ahead of now is recent; one further ahead was taken
/// before the clock stepped back.
pub fn within_last_of_another(now_ms: u64, stamp_ms: u64, span_ms: u64, skew_ms: u64) -> bool {
    stamp_ms <= now_ms.saturating_add(skew_ms) && now_ms.saturating_sub(stamp_ms) <= span_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_back_neither_stops_schedules_nor_keeps_stamps() {
        assert!(not_due_yet(1_000, 1_050, 100), "the next round, 50 ms ahead");
        assert!(!not_due_yet(1_100, 1_050, 100), "its time came");
        assert!(!not_due_yet(1_000, 3_600_000, 100), "set an hour ahead: before a step back");
        assert!(within_last(1_000, 900, 200) && !within_last(1_000, 700, 200));
        assert!(!within_last(1_000, 3_600_000, 200), "stamped after now: before a step back");
        assert!(within_last_of_another(1_000, 1_005, 200, 2_000), "another thread, 5 ms later");
        assert!(within_last_of_another(1_000, 900, 200, 2_000) && !within_last_of_another(1_000, 700, 200, 2_000));
        assert!(!within_last_of_another(1_000, 3_600_000, 200, 2_000), "an hour ahead: before a step back");
    }
}
