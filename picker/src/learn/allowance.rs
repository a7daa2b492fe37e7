//! A budget that grows with events and with time: how learning bounds what it spends per
//! second on reading answers, whatever the request rate.
//!
//! Every event (a request, a stream) adds `per_event`, every second adds `per_second`, and
//! each unit spent takes one. Spending is allowed while the balance is positive, so at high
//! rates the units spent average `per_event` per event plus `per_second` ÷ the rate, and at
//! low rates, where reading costs next to nothing a second, the time share covers nearly all.
//! What a quiet spell saves is capped (`saved_events` and `saved_seconds`' worth); an overdrawn balance is paid
//! back in full.

/// See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct Allowance {
    per_event: f64,
    per_second: f64,
    ceiling: f64,
    /// Units that may still be spent; below zero while spending ran ahead of earning.
    balance: f64,
    /// When the balance last grew with time (none before the first event).
    earned_at_ms: Option<u64>,
}

impl Allowance {
    /// Saves at most `saved_events` events' and `saved_seconds` seconds' worth; starts with
    /// `start_share` of that (0: nothing, 1: full). Negative or non-finite rates count as 0.
    pub fn new(per_event: f64, per_second: f64, saved_events: f64, saved_seconds: f64, start_share: f64) -> Self {
        let at_least_zero = |value: f64| if value.is_finite() { value.max(0.0) } else { 0.0 };
        let (per_event, per_second) = (at_least_zero(per_event), at_least_zero(per_second));
        let ceiling = per_event * saved_events + per_second * saved_seconds;
        Self { per_event, per_second, ceiling, balance: ceiling * start_share.clamp(0.0, 1.0), earned_at_ms: None }
    }

    /// One event at `now_ms`: its share and the time's since the last event are earned.
    pub fn earn(&mut self, now_ms: u64) {
        let seconds = self.earned_at_ms.map_or(0.0, |then| now_ms.saturating_sub(then) as f64 / 1000.0);
        self.earned_at_ms = Some(now_ms);
        self.balance = (self.balance + self.per_event + self.per_second * seconds).min(self.ceiling);
    }

    /// One event at `now_ms` that would spend one unit: whether it may (it then does).
    pub fn try_take_one(&mut self, now_ms: u64) -> bool {
        self.earn(now_ms);
        let allowed = self.allows();
        if allowed {
            self.spend(1.0);
        }
        allowed
    }

    /// Whether anything may be spent now.
    pub fn allows(&self) -> bool {
        self.balance > 0.0
    }

    /// `units` were spent (the balance may go below zero).
    pub fn spend(&mut self, units: f64) {
        self.balance -= units;
    }

    /// The most the balance saves.
    #[cfg(test)]
    fn ceiling(&self) -> f64 {
        self.ceiling
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_high_rates_the_share_per_event_is_what_is_spent() {
        let mut allowance = Allowance::new(0.25, 0.0, 64.0, 1.0, 0.0);
        let spent = (0..1000).filter(|_| allowance.try_take_one(0)).count();
        assert!((249..=251).contains(&spent), "{spent} of 1000 at a quarter each");
    }

    #[test]
    fn time_adds_to_the_balance_up_to_the_ceiling() {
        let mut allowance = Allowance::new(0.0, 10.0, 0.0, 1.0, 0.0);
        allowance.earn(0);
        assert!(!allowance.allows(), "nothing earned yet");
        allowance.earn(60_000);
        allowance.spend(10.0);
        assert!(!allowance.allows(), "a minute saves no more than a second's worth");
        allowance.earn(60_100);
        assert!(allowance.allows(), "a tenth of a second later one unit is earned");
    }

    #[test]
    fn a_full_start_allows_a_burst_and_bad_rates_allow_nothing() {
        let mut full = Allowance::new(0.0, 5.0, 0.0, 1.0, 1.0);
        let burst = (0..10).filter(|_| full.try_take_one(7)).count();
        assert_eq!(burst, 5, "a second's worth at once");
        let mut nan = Allowance::new(f64::NAN, -1.0, 64.0, 1.0, 1.0);
        nan.earn(1_000);
        assert!(!nan.allows());
        assert_eq!(nan.ceiling(), 0.0);
    }
}
