//! One worker's wait queue: bands by priority, flows (tenants) inside a band, FCFS inside a
//! flow. Plain data, no host: the release order and every bound are tested here.
//!
//! Order of release: the highest non-empty band first; inside it, flows take turns (round
//! robin: each turn releases one request of the next flow, so a tenant sending four times
//! as much gets the same share as one sending little while both wait); inside a flow, the
//! oldest first. Bounds: requests and bytes per band and in total, flows per band (beyond it
//! new tenants share one overflow flow), and priorities clamped into [`MAX_PRIORITY`] bands.
//! When the total is full, a request of higher priority evicts the newest sheddable one
//! (priority < 0), so no critical or standard request is refused while sheddable ones wait.

use std::collections::VecDeque;
use std::ops::ControlFlow;

use picker::config::MAX_PRIORITY;

/// The flow that tenants beyond `max_flows_per_band` share.
pub const OVERFLOW_FLOW: u64 = u64::MAX;

/// A waiting request. `id` is the Envoy context id (unique while the stream lives).
#[derive(Debug)]
pub struct Entry<T> {
    pub id: u32,
    /// The flow (tenant) it belongs to, as a key of its fairness id.
    pub flow: u64,
    pub bytes: u64,
    pub enqueued_ms: u64,
    pub deadline_ms: u64,
    /// The deadline is the request's own, shorter than its band's (its TTL header): its
    /// expiry says how patient the client is, not that the pool stayed full.
    pub own_deadline: bool,
    pub payload: T,
}

/// Where an entry left from: its band's priority.
#[derive(Debug)]
pub struct Left<T> {
    pub priority: i32,
    pub entry: Entry<T>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    pub band_requests: u32,
    pub band_bytes: u64,
    pub total_requests: u32,
    pub total_bytes: u64,
    pub flows_per_band: u32,
}

/// What became of a request offered to the queue.
#[derive(Debug)]
pub enum Admission<T> {
    Queued,
    /// Queued, after evicting these sheddable entries to make room.
    QueuedEvicting(Vec<Left<T>>),
    /// Not queued: its band or the whole queue is full.
    Full(Entry<T>),
}

#[derive(Debug)]
struct Flow<T> {
    key: u64,
    entries: VecDeque<Entry<T>>,
}

#[derive(Debug)]
struct Band<T> {
    priority: i32,
    flows: Vec<Flow<T>>,
    /// The flow whose turn is next.
    cursor: usize,
    requests: u32,
    bytes: u64,
}

#[derive(Debug)]
pub struct WaitQueue<T> {
    /// Highest priority first; empty bands are dropped.
    bands: Vec<Band<T>>,
    limits: QueueLimits,
    requests: u32,
    bytes: u64,
}

impl<T> WaitQueue<T> {
    pub fn new(limits: QueueLimits) -> Self {
        Self { bands: Vec::new(), limits, requests: 0, bytes: 0 }
    }

    pub fn len(&self) -> usize {
        self.requests as usize
    }

    pub fn is_empty(&self) -> bool {
        self.requests == 0
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// `(priority, requests, bytes)` of every non-empty band, highest first.
    pub fn bands(&self) -> impl Iterator<Item = (i32, u32, u64)> + '_ {
        self.bands.iter().map(|b| (b.priority, b.requests, b.bytes))
    }

    /// Offers `entry` to the band of `priority` (clamped), in its flow.
    pub fn push(&mut self, priority: i32, entry: Entry<T>) -> Admission<T> {
        let priority = priority.clamp(-MAX_PRIORITY, MAX_PRIORITY);
        let limits = self.limits;
        if let Some(band) = self.bands.iter().find(|b| b.priority == priority) {
            if band.requests >= limits.band_requests || band.bytes.saturating_add(entry.bytes) > limits.band_bytes {
                return Admission::Full(entry);
            }
        }
        if entry.bytes > limits.band_bytes {
            return Admission::Full(entry);
        }
        let mut evicted = Vec::new();
        while self.requests >= limits.total_requests || self.bytes.saturating_add(entry.bytes) > limits.total_bytes {
            match self.evict_sheddable_below(priority) {
                Some(left) => evicted.push(left),
                None => {
                    // Not enough sheddable work to make room: put back what was taken.
                    for left in evicted.into_iter().rev() {
                        self.insert(left.priority, left.entry);
                    }
                    return Admission::Full(entry);
                }
            }
        }
        self.insert(priority, entry);
        if evicted.is_empty() {
            Admission::Queued
        } else {
            Admission::QueuedEvicting(evicted)
        }
    }

    /// The priority of the band the next release would come from.
    pub fn next_priority(&self) -> Option<i32> {
        self.bands.first().map(|band| band.priority)
    }

    /// The next request to release: highest band, next flow's turn, oldest in that flow.
    pub fn pop_next(&mut self) -> Option<Left<T>> {
        let band = self.bands.first_mut()?;
        let index = band.cursor % band.flows.len().max(1);
        let flow = band.flows.get_mut(index)?;
        let entry = flow.entries.pop_front()?;
        let emptied = flow.entries.is_empty();
        if emptied {
            band.flows.remove(index);
            // The next flow moved into `index`: it is the next turn.
            band.cursor = index;
        } else {
            band.cursor = index + 1;
        }
        Some(self.account_removed(0, entry))
    }

    /// Calls `visit` on the waiting requests in release order (with their band's priority)
    /// until it breaks: highest band first; inside a band, each flow's oldest in turn from
    /// the flow whose turn is next, then each flow's second, and so on. What [`Self::pop_next`]
    /// would release is visited first. Flow control's release looks past requests whose pods
    /// have no room for one whose pods do ([`Self::take`] releases it).
    pub fn find_in_order<'a, R>(&'a self, mut visit: impl FnMut(i32, &'a Entry<T>) -> ControlFlow<R>) -> Option<R> {
        for band in &self.bands {
            let flows = band.flows.len();
            // The flows in turn order, each while it has an entry at this depth.
            let mut turns: Vec<&Flow<T>> =
                (0..flows).filter_map(|k| band.flows.get((band.cursor + k) % flows.max(1))).collect();
            let mut depth = 0;
            while !turns.is_empty() {
                turns.retain(|flow| flow.entries.len() > depth);
                for flow in &turns {
                    if let Some(entry) = flow.entries.get(depth) {
                        if let ControlFlow::Break(found) = visit(band.priority, entry) {
                            return Some(found);
                        }
                    }
                }
                depth += 1;
            }
        }
        None
    }

    /// Takes the request `id` out to release it. Its flow's turn passes, as when
    /// [`Self::pop_next`] releases the next in line: its flow goes last in the turn order.
    /// Flows passed over before it (their requests could not go) keep their turns, in their
    /// order: the next is still the first of them. (Moving the turn past them instead gave
    /// the flow before them the next place freeing for them all, again and again, while
    /// another model's requests went past them.)
    pub fn take(&mut self, id: u32) -> Option<Left<T>> {
        for (band_index, band) in self.bands.iter_mut().enumerate() {
            let found = band.flows.iter().enumerate().find_map(|(flow_index, flow)| {
                flow.entries.iter().position(|e| e.id == id).map(|position| (flow_index, position))
            });
            let Some((flow_index, position)) = found else { continue };
            let flows = band.flows.len();
            let cursor = band.cursor % flows.max(1);
            let flow = band.flows.get_mut(flow_index)?;
            let entry = flow.entries.remove(position)?;
            let emptied = flow.entries.is_empty();
            // Out of its place, then back in before the cursor's flow: last in turn.
            let taken = (flow_index < band.flows.len()).then(|| band.flows.remove(flow_index));
            let next = if flow_index < cursor { cursor - 1 } else { cursor };
            band.cursor = next;
            if let Some(taken) = taken.filter(|_| !emptied) {
                band.flows.insert(next.min(band.flows.len()), taken);
                band.cursor = next + 1;
            }
            return Some(self.account_removed(band_index, entry));
        }
        None
    }

    /// Removes the request `id` (its client went away), wherever it waits.
    pub fn remove(&mut self, id: u32) -> Option<Left<T>> {
        for (band_index, band) in self.bands.iter_mut().enumerate() {
            for (flow_index, flow) in band.flows.iter_mut().enumerate() {
                if let Some(position) = flow.entries.iter().position(|e| e.id == id) {
                    let entry = flow.entries.remove(position)?;
                    if flow.entries.is_empty() {
                        band.flows.remove(flow_index);
                        if band.cursor > flow_index {
                            band.cursor -= 1;
                        }
                    }
                    return Some(self.account_removed(band_index, entry));
                }
            }
        }
        None
    }

    /// Moves every request whose deadline is at or before `now_ms` into `out`. Every entry is
    /// looked at, not only each flow's front: a request's own TTL (its TTL header) may end
    /// before those of the requests queued ahead of it. The queue is bounded
    /// (`max_queued_requests`), and this runs once per tick. A request queued "after now" (the
    /// wall clock stepped back) is taken as queued now, its TTL whole.
    pub fn expire(&mut self, now_ms: u64, out: &mut Vec<Left<T>>) {
        let mut band_index = 0;
        while let Some(band) = self.bands.get_mut(band_index) {
            let mut flow_index = 0;
            while let Some(flow) = band.flows.get_mut(flow_index) {
                let mut expired = false;
                for entry in flow.entries.iter_mut() {
                    if entry.enqueued_ms > now_ms {
                        // The wall clock stepped back past its queueing: it waits its own TTL
                        // from now, not until the clock catches up with its deadline, and
                        // counts as queued now (older than those queued after the step).
                        let ttl = entry.deadline_ms.saturating_sub(entry.enqueued_ms);
                        entry.enqueued_ms = now_ms;
                        entry.deadline_ms = now_ms.saturating_add(ttl);
                    }
                    expired |= entry.deadline_ms <= now_ms;
                }
                if expired {
                    // One pass over the flow, keeping the others' order (removing each from
                    // the middle would move the rest once per expired entry).
                    for entry in std::mem::take(&mut flow.entries) {
                        if entry.deadline_ms > now_ms {
                            flow.entries.push_back(entry);
                            continue;
                        }
                        band.requests = band.requests.saturating_sub(1);
                        band.bytes = band.bytes.saturating_sub(entry.bytes);
                        self.requests = self.requests.saturating_sub(1);
                        self.bytes = self.bytes.saturating_sub(entry.bytes);
                        out.push(Left { priority: band.priority, entry });
                    }
                }
                if flow.entries.is_empty() {
                    band.flows.remove(flow_index);
                    if band.cursor > flow_index {
                        band.cursor -= 1;
                    }
                } else {
                    flow_index += 1;
                }
            }
            if band.flows.is_empty() {
                self.bands.remove(band_index);
            } else {
                band_index += 1;
            }
        }
    }

    /// Moves every sheddable request (bands below 0) into `out`: when a request of priority
    /// 0 or more runs out of time, the sheddable ones behind it go first, so no standard or
    /// critical request is dropped while a sheddable one still waits.
    pub fn shed_sheddable(&mut self, out: &mut Vec<Left<T>>) {
        while self.bands.last().is_some_and(|band| band.priority < 0) {
            let Some(band) = self.bands.pop() else { break };
            for entry in band.flows.into_iter().flat_map(|flow| flow.entries) {
                self.requests = self.requests.saturating_sub(1);
                self.bytes = self.bytes.saturating_sub(entry.bytes);
                out.push(Left { priority: band.priority, entry });
            }
        }
    }

    fn insert(&mut self, priority: i32, entry: Entry<T>) {
        let flow = entry.flow;
        let position = self.bands.iter().position(|b| b.priority <= priority).unwrap_or(self.bands.len());
        if self.bands.get(position).is_none_or(|b| b.priority != priority) {
            self.bands.insert(position, Band { priority, flows: Vec::new(), cursor: 0, requests: 0, bytes: 0 });
        }
        let Some(band) = self.bands.get_mut(position) else { return };
        let known = band.flows.iter().any(|f| f.key == flow);
        let key = if known || band.flows.len() < self.limits.flows_per_band as usize { flow } else { OVERFLOW_FLOW };
        band.requests += 1;
        band.bytes = band.bytes.saturating_add(entry.bytes);
        self.requests += 1;
        self.bytes = self.bytes.saturating_add(entry.bytes);
        match band.flows.iter_mut().find(|f| f.key == key) {
            Some(existing) => existing.entries.push_back(entry),
            None => band.flows.push(Flow { key, entries: VecDeque::from([entry]) }),
        }
    }

    /// Evicts the newest request of the lowest band, if that band is sheddable and below
    /// `priority`.
    fn evict_sheddable_below(&mut self, priority: i32) -> Option<Left<T>> {
        let band_index = self.bands.len().checked_sub(1)?;
        let band = self.bands.get_mut(band_index)?;
        if band.priority >= 0 || band.priority >= priority {
            return None;
        }
        let (flow_index, _) =
            band.flows.iter().enumerate().max_by_key(|(_, f)| f.entries.back().map_or(0, |e| e.enqueued_ms))?;
        let flow = band.flows.get_mut(flow_index)?;
        let entry = flow.entries.pop_back()?;
        if flow.entries.is_empty() {
            band.flows.remove(flow_index);
            if band.cursor > flow_index {
                band.cursor -= 1;
            }
        }
        Some(self.account_removed(band_index, entry))
    }

    /// Updates the counts for `entry` leaving band `band_index`, dropping the band if empty.
    fn account_removed(&mut self, band_index: usize, entry: Entry<T>) -> Left<T> {
        self.requests = self.requests.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(entry.bytes);
        let mut priority = 0;
        if let Some(band) = self.bands.get_mut(band_index) {
            priority = band.priority;
            band.requests = band.requests.saturating_sub(1);
            band.bytes = band.bytes.saturating_sub(entry.bytes);
            if band.flows.is_empty() {
                self.bands.remove(band_index);
            }
        }
        Left { priority, entry }
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
