//! [`Host`] over Envoy's Proxy-Wasm ABI.

use std::time::Duration;

use picker::store::{SharedStore, StoreError, Versioned};

use crate::abi;
use crate::error::{HostError, HostResult};
use crate::headers::{serialize, HeaderMap};
use crate::{Host, MetricKind};

// Proxy-Wasm enum values (spec 0.2.1).
const REQUEST_HEADERS: u32 = 0;
const RESPONSE_HEADERS: u32 = 2;
const RESPONSE_BODY: u32 = 1;
const REQUEST_STREAM: u32 = 0;
const CALL_RESPONSE_HEADERS: u32 = 6;
const REQUEST_BODY: u32 = 0;
const CALL_RESPONSE_BODY: u32 = 4;
const PLUGIN_CONFIGURATION: u32 = 7;
const METRIC_COUNTER: u32 = 0;
const METRIC_GAUGE: u32 = 1;

/// The real host. Zero-sized: every call goes straight to the ABI.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProxyHost;

impl SharedStore for ProxyHost {
    fn get(&self, key: &str) -> Result<Versioned, StoreError> {
        abi::shared_data(key).map_err(|e| StoreError::Host(format!("{key}: {e}")))
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), StoreError> {
        match abi::set_shared_data(key, value, cas.unwrap_or(0)) {
            Ok(true) => Ok(()),
            Ok(false) => Err(StoreError::CasMismatch),
            Err(error) => Err(StoreError::Host(format!("{key}: {error}"))),
        }
    }
}

impl Host for ProxyHost {
    fn now_ms(&self) -> u64 {
        abi::current_time_ns().map_or(0, |ns| ns / 1_000_000)
    }

    fn now_us(&self) -> u64 {
        abi::current_time_ns().map_or(0, |ns| ns / 1_000)
    }

    fn now_ns(&self) -> u64 {
        abi::current_time_ns().unwrap_or(0)
    }

    fn random_seed(&self) -> u64 {
        abi::current_time_ns().unwrap_or(0x5eed)
    }

    fn env_var(&self, name: &str) -> Option<String> {
        // WASI's environ_get, which Envoy serves from vm_config.environment_variables (natively,
        // the process's environment). Not UTF-8: as good as unset.
        std::env::var(name).ok()
    }

    fn set_tick_period_ms(&self, period_ms: u64) -> HostResult<()> {
        abi::set_tick_period_ms(u32::try_from(period_ms).unwrap_or(u32::MAX))
    }

    fn plugin_configuration(&self, size: usize) -> HostResult<Vec<u8>> {
        Ok(abi::buffer(PLUGIN_CONFIGURATION, 0, size)?.unwrap_or_default())
    }

    fn vm_id(&self) -> Option<String> {
        let bytes = abi::property(b"plugin_vm_id").ok().flatten()?;
        String::from_utf8(bytes).ok().filter(|id| !id.is_empty())
    }

    fn request_headers(&self) -> HostResult<HeaderMap> {
        let bytes = abi::header_map(REQUEST_HEADERS)?.unwrap_or_default();
        if bytes.is_empty() {
            return Ok(HeaderMap::default());
        }
        HeaderMap::parse(&bytes).ok_or(HostError { call: "get_header_map_pairs (malformed map)", status: 0 })
    }

    fn set_request_header(&self, name: &str, value: &[u8]) -> HostResult<()> {
        abi::replace_header(REQUEST_HEADERS, name, value)
    }

    fn remove_request_header(&self, name: &str) -> HostResult<()> {
        abi::remove_header(REQUEST_HEADERS, name)
    }

    fn request_body(&self, start: usize, size: usize) -> HostResult<Vec<u8>> {
        Ok(abi::buffer(REQUEST_BODY, start, size)?.unwrap_or_default())
    }

    fn set_request_body(&self, replaced: usize, body: &[u8]) -> HostResult<()> {
        abi::set_buffer(REQUEST_BODY, 0, replaced, body)
    }

    fn response_headers(&self) -> HostResult<HeaderMap> {
        let bytes = abi::header_map(RESPONSE_HEADERS)?.unwrap_or_default();
        if bytes.is_empty() {
            return Ok(HeaderMap::default());
        }
        HeaderMap::parse(&bytes).ok_or(HostError { call: "get_header_map_pairs (malformed map)", status: 0 })
    }

    fn response_header_value(&self, name: &str) -> HostResult<Option<Vec<u8>>> {
        abi::header_value(RESPONSE_HEADERS, name)
    }

    fn set_response_header(&self, name: &str, value: &[u8]) -> HostResult<()> {
        abi::replace_header(RESPONSE_HEADERS, name, value)
    }

    fn remove_response_header(&self, name: &str) -> HostResult<()> {
        abi::remove_header(RESPONSE_HEADERS, name)
    }

    fn response_body(&self, start: usize, size: usize) -> HostResult<Vec<u8>> {
        Ok(abi::buffer(RESPONSE_BODY, start, size)?.unwrap_or_default())
    }

    fn property(&self, path: &[&str]) -> HostResult<Option<Vec<u8>>> {
        // The ABI's path form: segments joined by NUL.
        abi::property(path.join("\0").as_bytes())
    }

    fn set_effective_context(&self, context_id: u32) -> HostResult<()> {
        abi::set_effective_context(context_id)
    }

    fn resume_request(&self, context_id: u32) -> HostResult<()> {
        abi::set_effective_context(context_id)?;
        abi::continue_stream(REQUEST_STREAM)
    }

    fn send_reply(&self, status: u32, headers: &[(&str, &str)], body: &[u8]) -> HostResult<()> {
        abi::send_local_response(status, &serialize(headers), body)
    }

    fn register_queue(&self, name: &str) -> HostResult<u32> {
        abi::register_queue(name)
    }

    fn resolve_queue(&self, vm_id: &str, name: &str) -> HostResult<Option<u32>> {
        abi::resolve_queue(vm_id, name)
    }

    fn enqueue(&self, queue: u32, message: &[u8]) -> HostResult<()> {
        abi::enqueue(queue, message)
    }

    fn dequeue(&self, queue: u32) -> HostResult<Option<Vec<u8>>> {
        abi::dequeue(queue)
    }

    fn dispatch_call(&self, cluster: &str, headers: &[(&str, &str)], body: &[u8], timeout_ms: u64) -> HostResult<u32> {
        // The SDK's wrapper, because its dispatcher must register the token (see `abi`). It
        // panics only on statuses Envoy's http_call does not return (it returns Ok,
        // BadArgument or InternalFailure).
        let body = (!body.is_empty()).then_some(body);
        proxy_wasm::hostcalls::dispatch_http_call(
            cluster,
            headers.to_vec(),
            body,
            vec![],
            Duration::from_millis(timeout_ms),
        )
        .map_err(|status| HostError { call: "http_call", status: status as u32 })
    }

    fn call_response_status(&self) -> Option<u16> {
        let bytes = abi::header_value(CALL_RESPONSE_HEADERS, ":status").ok().flatten()?;
        std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
    }

    fn call_response_header(&self, name: &str) -> Option<Vec<u8>> {
        abi::header_value(CALL_RESPONSE_HEADERS, name).ok().flatten()
    }

    fn call_response_body(&self, size: usize, max: usize) -> HostResult<Vec<u8>> {
        Ok(abi::buffer(CALL_RESPONSE_BODY, 0, size.min(max))?.unwrap_or_default())
    }

    fn define_metric(&self, kind: MetricKind, name: &str) -> HostResult<u32> {
        let kind = match kind {
            MetricKind::Counter => METRIC_COUNTER,
            MetricKind::Gauge => METRIC_GAUGE,
        };
        abi::define_metric(kind, name)
    }

    fn increment_metric(&self, id: u32, by: u64) -> HostResult<()> {
        abi::increment_metric(id, i64::try_from(by).unwrap_or(i64::MAX))
    }

    fn record_metric(&self, id: u32, value: u64) -> HostResult<()> {
        abi::record_metric(id, value)
    }
}
