//! [`MockHost`]: the host in memory, recording what the code under test asked of it.
//!
//! It keeps the real semantics where logic depends on them: shared data has CAS and no
//! delete ([`picker::store::MemoryStore`]), queues are FIFO and resolvable only once
//! registered, metric values accumulate. Tests set the request (headers, body), the clock
//! and a call's answer, then read back headers written, replies sent, calls dispatched and
//! metric values.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};

use picker::store::{MemoryStore, SharedStore, StoreError, Versioned};

use crate::error::{HostError, HostResult};
use crate::headers::HeaderMap;
use crate::tally::{pairs_bytes, HostCallTally};
use crate::{Host, MetricKind};

/// A local reply the code sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u32,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The stream it went to: the effective context when it was sent (`None`: the stream
    /// whose callback is running, none having been set).
    pub context: Option<u32>,
}

/// An outgoing call the code dispatched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub token: u32,
    pub cluster: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

#[derive(Default)]
pub struct MockHost {
    pub clock_ms: Cell<u64>,
    pub seed: Cell<u64>,
    pub store: MemoryStore,
    pub configuration: RefCell<Vec<u8>>,
    pub headers: RefCell<HeaderMap>,
    pub body: RefCell<Vec<u8>>,
    pub replies: RefCell<Vec<Reply>>,
    pub queues: RefCell<BTreeMap<String, u32>>,
    pub queue_messages: RefCell<BTreeMap<u32, VecDeque<Vec<u8>>>>,
    pub calls: RefCell<Vec<Call>>,
    /// The answer the next `call_response_*` reads: `(status, body)`; `None` = no answer.
    pub call_answer: RefCell<Option<(u16, Vec<u8>)>>,
    /// The headers of that answer.
    pub call_answer_headers: RefCell<Vec<(String, String)>>,
    /// Refuse every dispatch (an unknown cluster, as Envoy answers BadArgument).
    pub refuse_calls: Cell<bool>,
    /// Fail every shared-data access (a host in trouble).
    pub fail_store: Cell<bool>,
    /// Refuse every request header write (a stream Envoy no longer takes changes on).
    pub refuse_header_writes: Cell<bool>,
    pub metric_names: RefCell<Vec<(String, MetricKind)>>,
    pub metric_values: RefCell<Vec<u64>>,
    pub tick_period_ms: Cell<Option<u64>>,
    /// The VM's environment variables (Envoy's `vm_config.environment_variables`).
    pub env: RefCell<BTreeMap<String, String>>,
    pub response_headers: RefCell<HeaderMap>,
    /// The response body chunk being delivered.
    pub response_body: RefCell<Vec<u8>>,
    /// Attributes by NUL-joined path (`"upstream\0address"`).
    pub properties: RefCell<BTreeMap<String, Vec<u8>>>,
    /// Context ids resumed, in order.
    pub resumed: RefCell<Vec<u32>>,
    /// The context later stream calls act on, once set (`set_effective_context`).
    pub effective_context: Cell<Option<u32>>,
    /// Contexts that are gone: `set_effective_context` on them fails, as Envoy's does.
    pub gone_contexts: RefCell<Vec<u32>>,
    /// Every call made, by the ABI function Envoy would serve, with the bytes copied.
    pub tally: HostCallTally,
    /// Run after each shared-data write, with the store and the key written: another worker
    /// acting between two of this one's calls, as Envoy's other threads can.
    pub after_write: RefCell<Option<AfterWrite>>,
}

/// See [`MockHost::after_write`].
pub type AfterWrite = Box<dyn FnMut(&MemoryStore, &str)>;

impl MockHost {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the current request's headers and body.
    pub fn set_request(&self, headers: &[(&str, &str)], body: &[u8]) {
        *self.headers.borrow_mut() = HeaderMap::from_pairs(headers);
        *self.body.borrow_mut() = body.to_vec();
    }

    /// Sets the current response's headers and the body chunk being delivered.
    pub fn set_response(&self, headers: &[(&str, &str)], body: &[u8]) {
        *self.response_headers.borrow_mut() = HeaderMap::from_pairs(headers);
        *self.response_body.borrow_mut() = body.to_vec();
    }

    /// The current value of the response header `name` as text.
    pub fn response_header(&self, name: &str) -> Option<String> {
        self.response_headers.borrow().get(name).map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// The current value of the request header `name` as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.borrow().get(name).map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// A metric's value by name (summed if defined twice, as Envoy shares one stat).
    pub fn metric(&self, name: &str) -> u64 {
        let names = self.metric_names.borrow();
        let values = self.metric_values.borrow();
        names.iter().zip(values.iter()).filter(|((n, _), _)| n == name).map(|(_, v)| *v).sum()
    }

    pub fn advance(&self, ms: u64) {
        self.clock_ms.set(self.clock_ms.get() + ms);
    }

    fn store_check(&self) -> Result<(), StoreError> {
        if self.fail_store.get() {
            return Err(StoreError::Host("mock: store failing".into()));
        }
        Ok(())
    }
}

impl SharedStore for MockHost {
    fn get(&self, key: &str) -> Result<Versioned, StoreError> {
        self.store_check()?;
        let value = self.store.get(key)?;
        self.tally.note("proxy_get_shared_data", value.0.as_ref().map_or(0, Vec::len), key.len());
        Ok(value)
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), StoreError> {
        self.store_check()?;
        self.tally.note("proxy_set_shared_data", 0, key.len() + value.len());
        self.store.set(key, value, cas)?;
        if let Some(after_write) = self.after_write.borrow_mut().as_mut() {
            after_write(&self.store, key);
        }
        Ok(())
    }
}

/// Replaces every value of `name` with one `value`, as Envoy's replace does.
fn replace_in(headers: &RefCell<HeaderMap>, name: &str, value: &[u8]) {
    let mut headers = headers.borrow_mut();
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> =
        headers.iter().filter(|(n, _)| *n != name.as_bytes()).map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
    pairs.push((name.as_bytes().to_vec(), value.to_vec()));
    *headers = HeaderMap::new(pairs);
}

fn remove_from(headers: &RefCell<HeaderMap>, name: &str) {
    let mut headers = headers.borrow_mut();
    let pairs = headers.iter().filter(|(n, _)| *n != name.as_bytes()).map(|(n, v)| (n.to_vec(), v.to_vec()));
    *headers = HeaderMap::new(pairs.collect());
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(n, v)| ((*n).to_string(), (*v).to_string())).collect()
}

impl Host for MockHost {
    fn now_ms(&self) -> u64 {
        self.tally.note("proxy_get_current_time_nanoseconds", 8, 0);
        self.clock_ms.get()
    }

    fn random_seed(&self) -> u64 {
        self.seed.get()
    }

    fn set_tick_period_ms(&self, period_ms: u64) -> HostResult<()> {
        self.tally.note("proxy_set_tick_period_milliseconds", 0, 0);
        self.tick_period_ms.set(Some(period_ms));
        Ok(())
    }

    fn plugin_configuration(&self, _size: usize) -> HostResult<Vec<u8>> {
        Ok(self.configuration.borrow().clone())
    }

    fn vm_id(&self) -> Option<String> {
        Some("wasm-epp".into())
    }

    fn env_var(&self, name: &str) -> Option<String> {
        let value = self.env.borrow().get(name).cloned();
        self.tally.note("environ_get", value.as_ref().map_or(0, String::len), name.len());
        value
    }

    fn request_headers(&self) -> HostResult<HeaderMap> {
        self.tally.note("proxy_get_header_map_pairs", pairs_bytes(self.headers.borrow().iter()), 0);
        Ok(self.headers.borrow().clone())
    }

    fn set_request_header(&self, name: &str, value: &[u8]) -> HostResult<()> {
        self.tally.note("proxy_replace_header_map_value", 0, name.len() + value.len());
        if self.refuse_header_writes.get() {
            return Err(HostError { call: "set_request_header", status: 2 });
        }
        replace_in(&self.headers, name, value);
        Ok(())
    }

    fn remove_request_header(&self, name: &str) -> HostResult<()> {
        self.tally.note("proxy_remove_header_map_value", 0, name.len());
        remove_from(&self.headers, name);
        Ok(())
    }

    fn response_headers(&self) -> HostResult<HeaderMap> {
        self.tally.note("proxy_get_header_map_pairs", pairs_bytes(self.response_headers.borrow().iter()), 0);
        Ok(self.response_headers.borrow().clone())
    }

    fn response_header_value(&self, name: &str) -> HostResult<Option<Vec<u8>>> {
        let value = self.response_headers.borrow().get(name).map(<[u8]>::to_vec);
        self.tally.note("proxy_get_header_map_value", value.as_ref().map_or(0, Vec::len), name.len());
        Ok(value)
    }

    fn set_response_header(&self, name: &str, value: &[u8]) -> HostResult<()> {
        self.tally.note("proxy_replace_header_map_value", 0, name.len() + value.len());
        replace_in(&self.response_headers, name, value);
        Ok(())
    }

    fn remove_response_header(&self, name: &str) -> HostResult<()> {
        self.tally.note("proxy_remove_header_map_value", 0, name.len());
        remove_from(&self.response_headers, name);
        Ok(())
    }

    fn response_body(&self, start: usize, size: usize) -> HostResult<Vec<u8>> {
        let body = self.response_body.borrow();
        let end = start.saturating_add(size).min(body.len());
        let chunk = body.get(start.min(end)..end).unwrap_or_default().to_vec();
        self.tally.note("proxy_get_buffer_bytes", chunk.len(), 0);
        Ok(chunk)
    }

    fn property(&self, path: &[&str]) -> HostResult<Option<Vec<u8>>> {
        self.tally.note("proxy_get_property", 0, path.iter().map(|p| p.len() + 1).sum());
        Ok(self.properties.borrow().get(&path.join("\0")).cloned())
    }

    fn set_effective_context(&self, context_id: u32) -> HostResult<()> {
        self.tally.note("proxy_set_effective_context", 0, 0);
        if self.gone_contexts.borrow().contains(&context_id) {
            return Err(HostError { call: "set_effective_context", status: 2 });
        }
        self.effective_context.set(Some(context_id));
        Ok(())
    }

    fn resume_request(&self, context_id: u32) -> HostResult<()> {
        self.tally.note("proxy_continue_stream", 0, 0);
        self.resumed.borrow_mut().push(context_id);
        Ok(())
    }

    fn request_body(&self, start: usize, size: usize) -> HostResult<Vec<u8>> {
        let body = self.body.borrow();
        let end = start.saturating_add(size).min(body.len());
        let copy = body.get(start.min(end)..end).unwrap_or_default().to_vec();
        self.tally.note("proxy_get_buffer_bytes", copy.len(), 0);
        Ok(copy)
    }

    fn set_request_body(&self, replaced: usize, body: &[u8]) -> HostResult<()> {
        self.tally.note("proxy_set_buffer_bytes", 0, body.len());
        let mut held = self.body.borrow_mut();
        let keep = replaced.min(held.len());
        let tail = held.split_off(keep);
        *held = body.to_vec();
        held.extend(tail);
        Ok(())
    }

    fn send_reply(&self, status: u32, headers: &[(&str, &str)], body: &[u8]) -> HostResult<()> {
        self.tally.note(
            "proxy_send_local_response",
            0,
            pairs_bytes(headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()))) + body.len(),
        );
        let context = self.effective_context.get();
        self.replies.borrow_mut().push(Reply { status, headers: owned(headers), body: body.to_vec(), context });
        Ok(())
    }

    fn register_queue(&self, name: &str) -> HostResult<u32> {
        self.tally.note("proxy_register_shared_queue", 0, name.len());
        let mut queues = self.queues.borrow_mut();
        let next = u32::try_from(queues.len()).unwrap_or(u32::MAX).saturating_add(1);
        let id = *queues.entry(name.to_string()).or_insert(next);
        self.queue_messages.borrow_mut().entry(id).or_default();
        Ok(id)
    }

    fn resolve_queue(&self, _vm_id: &str, name: &str) -> HostResult<Option<u32>> {
        self.tally.note("proxy_resolve_shared_queue", 0, name.len());
        Ok(self.queues.borrow().get(name).copied())
    }

    fn enqueue(&self, queue: u32, message: &[u8]) -> HostResult<()> {
        self.tally.note("proxy_enqueue_shared_queue", 0, message.len());
        match self.queue_messages.borrow_mut().get_mut(&queue) {
            Some(messages) => {
                messages.push_back(message.to_vec());
                Ok(())
            }
            None => Err(HostError { call: "enqueue_shared_queue", status: 1 }),
        }
    }

    fn dequeue(&self, queue: u32) -> HostResult<Option<Vec<u8>>> {
        match self.queue_messages.borrow_mut().get_mut(&queue) {
            Some(messages) => {
                let message = messages.pop_front();
                self.tally.note("proxy_dequeue_shared_queue", message.as_ref().map_or(0, Vec::len), 0);
                Ok(message)
            }
            None => Err(HostError { call: "dequeue_shared_queue", status: 1 }),
        }
    }

    fn dispatch_call(&self, cluster: &str, headers: &[(&str, &str)], body: &[u8], _timeout_ms: u64) -> HostResult<u32> {
        if self.refuse_calls.get() {
            return Err(HostError { call: "http_call", status: 2 });
        }
        self.tally.note("proxy_http_call", 0, cluster.len() + body.len());
        let mut calls = self.calls.borrow_mut();
        let token = u32::try_from(calls.len()).unwrap_or(u32::MAX).saturating_add(1);
        calls.push(Call { token, cluster: cluster.to_string(), headers: owned(headers), body: body.to_vec() });
        Ok(token)
    }

    fn call_response_status(&self) -> Option<u16> {
        self.tally.note("proxy_get_header_map_value", 3, 7);
        self.call_answer.borrow().as_ref().map(|(status, _)| *status)
    }

    fn call_response_header(&self, name: &str) -> Option<Vec<u8>> {
        self.tally.note("proxy_get_header_map_value", 0, name.len());
        let headers = self.call_answer_headers.borrow();
        headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_bytes().to_vec())
    }

    fn call_response_body(&self, size: usize, max: usize) -> HostResult<Vec<u8>> {
        let answer = self.call_answer.borrow();
        let body = answer.as_ref().map(|(_, body)| body.as_slice()).unwrap_or_default();
        let copy = body.get(..size.min(max).min(body.len())).unwrap_or_default().to_vec();
        self.tally.note("proxy_get_buffer_bytes", copy.len(), 0);
        Ok(copy)
    }

    fn define_metric(&self, kind: MetricKind, name: &str) -> HostResult<u32> {
        self.tally.note("proxy_define_metric", 0, name.len());
        let mut names = self.metric_names.borrow_mut();
        names.push((name.to_string(), kind));
        self.metric_values.borrow_mut().push(0);
        Ok(u32::try_from(names.len() - 1).unwrap_or(u32::MAX))
    }

    fn increment_metric(&self, id: u32, by: u64) -> HostResult<()> {
        self.tally.note("proxy_increment_metric", 0, 0);
        let mut values = self.metric_values.borrow_mut();
        let slot = values.get_mut(id as usize).ok_or(HostError { call: "increment_metric", status: 2 })?;
        *slot = slot.saturating_add(by);
        Ok(())
    }

    fn record_metric(&self, id: u32, value: u64) -> HostResult<()> {
        self.tally.note("proxy_record_metric", 0, 0);
        let mut values = self.metric_values.borrow_mut();
        *values.get_mut(id as usize).ok_or(HostError { call: "record_metric", status: 2 })? = value;
        Ok(())
    }
}
