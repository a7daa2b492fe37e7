//! Why a list failed, and whether discovery is working: the singleton logs a line when this
//! state changes (first failure, a different kind of failure, recovery), never per tick, so
//! an API server outage of an hour is a handful of log lines and a climbing counter.

use std::fmt;

/// Why a LIST (or the InferencePool read) did not produce a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiscoveryError {
    /// Timeout, reset or no upstream: the host reported no status.
    NoAnswer,
    /// The host refused to send the call (unknown cluster, for one).
    NotSent(String),
    /// 401: the token is missing, expired or not accepted.
    Unauthorized,
    /// 403: the service account may not list pods (or read the InferencePool).
    Forbidden,
    /// 404: the namespace's resource or the InferencePool does not exist.
    NotFound,
    /// 410 on every restart of a paginated list (the API server kept compacting).
    Expired,
    /// Any other non-200 status (5xx, 429, ...).
    Status(u16),
    /// A 200 whose body is not the expected object.
    Invalid(String),
    /// An answer larger than `max_response_bytes`.
    ResponseTooLarge(usize),
    /// More ready pods than the pod table holds, or more pages than a list may have.
    PoolTooLarge(String),
}

impl DiscoveryError {
    /// A stable name per kind, so a log line is written when the kind changes, not when
    /// the detail (a byte count, a parse position) does.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NoAnswer => "no_answer",
            Self::NotSent(_) => "not_sent",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not_found",
            Self::Expired => "expired",
            Self::Status(_) => "status",
            Self::Invalid(_) => "invalid",
            Self::ResponseTooLarge(_) => "response_too_large",
            Self::PoolTooLarge(_) => "pool_too_large",
        }
    }

    /// Two failures are one state for logging when they are the same kind and, for a
    /// status, the same code (a 503 outage that turns into 504 timeouts is news).
    pub fn same_state(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Status(a), Self::Status(b)) => a == b,
            _ => self.kind() == other.kind(),
        }
    }

    /// The error for a non-200 status.
    pub fn from_status(status: u16) -> Self {
        match status {
            401 => Self::Unauthorized,
            403 => Self::Forbidden,
            404 => Self::NotFound,
            410 => Self::Expired,
            other => Self::Status(other),
        }
    }
}

impl fmt::Display for DiscoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoAnswer => f.write_str("the API server did not answer (timeout or connection failure)"),
            Self::NotSent(reason) => write!(f, "the API call could not be sent: {reason}"),
            Self::Unauthorized => f.write_str("401 Unauthorized: check the token Envoy injects on the cluster"),
            Self::Forbidden => f.write_str("403 Forbidden: the service account may not list pods / read the pool"),
            Self::NotFound => f.write_str("404 Not Found: no such namespace resource or InferencePool"),
            Self::Expired => f.write_str("410 Gone: the list snapshot kept expiring"),
            // Envoy answers 503 itself when it cannot connect and 504 when the call times out.
            Self::Status(503) => f.write_str("503: the API server is unreachable or unavailable"),
            Self::Status(504) => f.write_str("504: the API call timed out"),
            Self::Status(status) => write!(f, "the API server answered {status}"),
            Self::Invalid(reason) => write!(f, "unexpected answer: {reason}"),
            Self::ResponseTooLarge(bytes) => write!(f, "answer of {bytes} bytes is over max_response_bytes"),
            Self::PoolTooLarge(what) => f.write_str(what),
        }
    }
}

/// A change worth one log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthChange {
    /// The first list succeeded, or lists succeed again after `failures` failed ones.
    Up { failures: u64 },
    /// Lists started failing (or fail for a different reason than before).
    Failing(DiscoveryError),
}

/// Discovery's state as logged.
#[derive(Debug, Default)]
pub struct Health {
    failing: Option<DiscoveryError>,
    started: bool,
    failures_in_a_row: u64,
    pending: Option<HealthChange>,
}

impl Health {
    pub fn success(&mut self) {
        if !self.started || self.failing.is_some() {
            self.pending = Some(HealthChange::Up { failures: self.failures_in_a_row });
        }
        self.started = true;
        self.failing = None;
        self.failures_in_a_row = 0;
    }

    pub fn failure(&mut self, error: &DiscoveryError) {
        self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
        if !self.failing.as_ref().is_some_and(|last| last.same_state(error)) {
            self.pending = Some(HealthChange::Failing(error.clone()));
        }
        self.failing = Some(error.clone());
    }

    /// True while the last list failed (the pool in use is the last known one).
    pub fn is_failing(&self) -> bool {
        self.failing.is_some()
    }

    pub fn take_change(&mut self) -> Option<HealthChange> {
        self.pending.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_change_per_state_not_per_failure() {
        let mut health = Health::default();
        health.failure(&DiscoveryError::Status(503));
        assert_eq!(health.take_change(), Some(HealthChange::Failing(DiscoveryError::Status(503))));
        health.failure(&DiscoveryError::Status(503));
        assert_eq!(health.take_change(), None, "same state, no new line");
        health.failure(&DiscoveryError::Status(504));
        assert_eq!(health.take_change(), Some(HealthChange::Failing(DiscoveryError::Status(504))), "timeouts now");
        health.failure(&DiscoveryError::Unauthorized);
        assert_eq!(health.take_change(), Some(HealthChange::Failing(DiscoveryError::Unauthorized)));
        health.success();
        assert_eq!(health.take_change(), Some(HealthChange::Up { failures: 4 }));
        health.success();
        assert_eq!(health.take_change(), None);
        assert!(!health.is_failing());
    }
}
