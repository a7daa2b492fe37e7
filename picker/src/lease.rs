//! Electing one poller among the filter's root contexts where no singleton can run.
//!
//! Istio's `WasmPlugin` (and any setup without a bootstrap extension) loads only the HTTP
//! filter: every worker thread has its own root context, and each could poll the pods
//! and the API server. One of them should. The election is a lease in one shared-data key,
//! [`LEASE_KEY`], holding the holder's id and the lease's expiry:
//!
//! - a free or expired lease is claimed with a compare-and-swap write, then re-read: the
//!   claim is ours only if the record names us;
//! - a claim becomes leadership at the holder's next tick, when its renewal (another CAS)
//!   succeeds. Shared data has no create-if-absent, so the very first write of the key is
//!   a plain write that a racing contender can overwrite; waiting for one successful
//!   renewal means such a lost claim is noticed before it ever polls;
//! - a holder that stops renewing (its VM died) loses the lease at expiry.
//!
//! Time comes in as `now_ms` (host wall clock, the same for every thread of one Envoy).

use crate::store::{SharedStore, StoreError};

pub use crate::keys::LEASE_KEY;

/// Who holds the lease, until when. `holder == 0` is a free lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRecord {
    pub holder: u64,
    pub expires_ms: u64,
}

impl LeaseRecord {
    pub const FREE: Self = Self { holder: 0, expires_ms: 0 };

    pub fn encode(self) -> [u8; 16] {
        let mut bytes = [0u8; 16];
        let (holder, expires) = bytes.split_at_mut(8);
        holder.copy_from_slice(&self.holder.to_le_bytes());
        expires.copy_from_slice(&self.expires_ms.to_le_bytes());
        bytes
    }

    /// Anything that is not a record reads as a free lease: a garbled key must not block
    /// the election forever.
    pub fn decode(bytes: &[u8]) -> Self {
        let Ok(bytes) = <[u8; 16]>::try_from(bytes) else { return Self::FREE };
        let (holder, expires) = bytes.split_at(8);
        match (holder.try_into(), expires.try_into()) {
            (Ok(holder), Ok(expires)) => {
                Self { holder: u64::from_le_bytes(holder), expires_ms: u64::from_le_bytes(expires) }
            }
            _ => Self::FREE,
        }
    }

    fn held_by_someone_at(self, now_ms: u64) -> bool {
        self.holder != 0 && self.expires_ms > now_ms
    }
}

/// What this contender should do until its next tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Poll: the lease is ours and was renewed just now.
    Leader,
    /// Our claim is written; leadership starts with the next successful renewal.
    Claimed,
    /// Someone else holds the lease, or we lost a race: do not poll.
    Follower,
}

/// One contender: a root context that would poll if elected.
#[derive(Debug)]
pub struct Lease {
    me: u64,
    ttl_ms: u64,
}

impl Lease {
    /// `me` must be unique among contenders and non-zero (seed it from the clock and the
    /// root context id). `ttl_ms` should be several tick periods: a leader that misses
    /// that many ticks in a row is presumed dead.
    pub fn new(me: u64, ttl_ms: u64) -> Self {
        debug_assert!(me != 0, "0 marks a free lease");
        Self { me: me.max(1), ttl_ms }
    }

    /// One election step; call it on every tick and poll only while it returns `Leader`.
    pub fn tick(&self, store: &dyn SharedStore, now_ms: u64) -> Role {
        let (bytes, cas) = match store.get(LEASE_KEY) {
            Ok(read) => read,
            Err(_) => return Role::Follower, // Cannot tell: polling twice is worse than a pause.
        };
        let Some(bytes) = bytes else {
            // Never written: create it free, claim on the next tick (all later writes are CAS).
            let _ = store.set(LEASE_KEY, &LeaseRecord::FREE.encode(), None);
            return Role::Follower;
        };
        let record = LeaseRecord::decode(&bytes);
        let mine = LeaseRecord { holder: self.me, expires_ms: now_ms.saturating_add(self.ttl_ms) };
        if record.holder == self.me && record.expires_ms > now_ms {
            return match store.set(LEASE_KEY, &mine.encode(), cas) {
                Ok(()) => Role::Leader,
                Err(_) => Role::Follower,
            };
        }
        if record.held_by_someone_at(now_ms) {
            return Role::Follower;
        }
        match store.set(LEASE_KEY, &mine.encode(), cas) {
            Ok(()) => {}
            Err(StoreError::CasMismatch) | Err(StoreError::Host(_)) => return Role::Follower,
        }
        // Re-read: the write may have raced with the key's creation (a plain write).
        match store.get(LEASE_KEY) {
            Ok((Some(bytes), _)) if LeaseRecord::decode(&bytes).holder == self.me => Role::Claimed,
            _ => Role::Follower,
        }
    }

    /// Gives the lease up (on shutdown), so another contender takes over at once.
    pub fn release(&self, store: &dyn SharedStore) {
        if let Ok((Some(bytes), cas)) = store.get(LEASE_KEY) {
            if LeaseRecord::decode(&bytes).holder == self.me {
                let _ = store.set(LEASE_KEY, &LeaseRecord::FREE.encode(), cas);
            }
        }
    }
}

#[cfg(test)]
mod tests;
