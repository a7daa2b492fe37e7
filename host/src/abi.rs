//! The Proxy-Wasm ABI, called directly: the only `unsafe` code in wasm-epp.
//!
//! Why not `proxy_wasm::hostcalls`: in proxy-wasm 0.2.5 most of its wrappers `panic!` on a
//! status they did not expect, and the map helpers `unwrap()` a UTF-8 conversion of header
//! values. A request header holding one Latin-1 byte (legal obs-text) then killed the VM
//! and every later request on that worker. Here every call returns the host's status as a
//! [`HostError`], maps are kept as bytes, and map data from the host is parsed with bounds
//! checks. The one SDK wrapper still used is `dispatch_http_call` (in `proxy.rs`): the SDK's
//! dispatcher must register the call's token or it would panic on the answer, and that
//! registration is not public.
//!
//! Memory the host returns was allocated through the SDK's exported
//! `proxy_on_memory_allocate` (a boxed `[u8]` of exactly the returned size), so it is taken
//! back with `Vec::from_raw_parts(ptr, len, len)`, as the SDK does.

#![allow(unsafe_code)]

use std::ptr::{null, null_mut};

use crate::error::{HostError, HostResult};

// Status codes of the ABI (proxy-wasm spec 0.2.1).
const OK: u32 = 0;
const NOT_FOUND: u32 = 1;
const EMPTY: u32 = 7;
const CAS_MISMATCH: u32 = 8;

#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_get_current_time_nanoseconds(return_time: *mut u64) -> u32;
    fn proxy_set_tick_period_milliseconds(period: u32) -> u32;
    fn proxy_get_buffer_bytes(kind: u32, start: usize, max: usize, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_set_buffer_bytes(kind: u32, start: usize, size: usize, data: *const u8, data_size: usize) -> u32;
    fn proxy_get_header_map_pairs(kind: u32, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_get_header_map_value(
        kind: u32,
        key: *const u8,
        key_size: usize,
        data: *mut *mut u8,
        size: *mut usize,
    ) -> u32;
    fn proxy_replace_header_map_value(
        kind: u32,
        key: *const u8,
        key_size: usize,
        value: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_remove_header_map_value(kind: u32, key: *const u8, key_size: usize) -> u32;
    fn proxy_get_property(path: *const u8, path_size: usize, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_get_shared_data(
        key: *const u8,
        key_size: usize,
        data: *mut *mut u8,
        size: *mut usize,
        cas: *mut u32,
    ) -> u32;
    fn proxy_set_shared_data(key: *const u8, key_size: usize, value: *const u8, value_size: usize, cas: u32) -> u32;
    fn proxy_register_shared_queue(name: *const u8, name_size: usize, id: *mut u32) -> u32;
    fn proxy_resolve_shared_queue(
        vm_id: *const u8,
        vm_id_size: usize,
        name: *const u8,
        name_size: usize,
        id: *mut u32,
    ) -> u32;
    fn proxy_dequeue_shared_queue(id: u32, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_enqueue_shared_queue(id: u32, value: *const u8, value_size: usize) -> u32;
    fn proxy_send_local_response(
        status: u32,
        details: *const u8,
        details_size: usize,
        body: *const u8,
        body_size: usize,
        headers: *const u8,
        headers_size: usize,
        grpc_status: i32,
    ) -> u32;
    fn proxy_continue_stream(stream: u32) -> u32;
    fn proxy_set_effective_context(context_id: u32) -> u32;
    fn proxy_define_metric(kind: u32, name: *const u8, name_size: usize, id: *mut u32) -> u32;
    fn proxy_increment_metric(id: u32, offset: i64) -> u32;
    fn proxy_record_metric(id: u32, value: u64) -> u32;
}

fn check(call: &'static str, status: u32) -> HostResult<()> {
    if status == OK {
        Ok(())
    } else {
        Err(HostError { call, status })
    }
}

/// Takes ownership of bytes the host allocated for us (null: nothing returned).
fn take_bytes(data: *mut u8, size: usize) -> Option<Vec<u8>> {
    if data.is_null() {
        return None;
    }
    // SAFETY: the host filled `data` with a buffer of exactly `size` bytes that it obtained
    // from our `proxy_on_memory_allocate`; nobody else owns it.
    Some(unsafe { Vec::from_raw_parts(data, size, size) })
}

pub fn current_time_ns() -> HostResult<u64> {
    let mut time = 0u64;
    // SAFETY: the host writes one u64 through a valid pointer.
    check("get_current_time", unsafe { proxy_get_current_time_nanoseconds(&mut time) })?;
    Ok(time)
}

pub fn set_tick_period_ms(period: u32) -> HostResult<()> {
    // SAFETY: plain value argument.
    check("set_tick_period", unsafe { proxy_set_tick_period_milliseconds(period) })
}

/// A buffer's bytes (`kind`: proxy-wasm buffer type); `None` when the host has none.
pub fn buffer(kind: u32, start: usize, max: usize) -> HostResult<Option<Vec<u8>>> {
    let (mut data, mut size) = (null_mut(), 0usize);
    // SAFETY: the host writes a pointer and a size through valid pointers.
    match unsafe { proxy_get_buffer_bytes(kind, start, max, &mut data, &mut size) } {
        OK => Ok(take_bytes(data, size)),
        NOT_FOUND => Ok(None),
        status => Err(HostError { call: "get_buffer_bytes", status }),
    }
}

/// Replaces bytes `start..start + size` of a buffer with `data` (the whole body when `start`
/// is 0 and `size` its length).
pub fn set_buffer(kind: u32, start: usize, size: usize, data: &[u8]) -> HostResult<()> {
    // SAFETY: `data` outlives the call; the host copies it.
    check("set_buffer_bytes", unsafe { proxy_set_buffer_bytes(kind, start, size, data.as_ptr(), data.len()) })
}

/// A header map in the ABI's serialized form (parse with [`crate::HeaderMap::parse`]).
pub fn header_map(kind: u32) -> HostResult<Option<Vec<u8>>> {
    let (mut data, mut size) = (null_mut(), 0usize);
    // SAFETY: as in `buffer`.
    match unsafe { proxy_get_header_map_pairs(kind, &mut data, &mut size) } {
        OK => Ok(take_bytes(data, size)),
        NOT_FOUND => Ok(None),
        status => Err(HostError { call: "get_header_map_pairs", status }),
    }
}

pub fn header_value(kind: u32, name: &str) -> HostResult<Option<Vec<u8>>> {
    let (mut data, mut size) = (null_mut(), 0usize);
    // SAFETY: `name` outlives the call; the host writes through valid pointers.
    match unsafe { proxy_get_header_map_value(kind, name.as_ptr(), name.len(), &mut data, &mut size) } {
        OK => Ok(take_bytes(data, size)),
        NOT_FOUND => Ok(None),
        status => Err(HostError { call: "get_header_map_value", status }),
    }
}

pub fn replace_header(kind: u32, name: &str, value: &[u8]) -> HostResult<()> {
    // SAFETY: both slices outlive the call.
    let status =
        unsafe { proxy_replace_header_map_value(kind, name.as_ptr(), name.len(), value.as_ptr(), value.len()) };
    check("replace_header_map_value", status)
}

pub fn remove_header(kind: u32, name: &str) -> HostResult<()> {
    // SAFETY: `name` outlives the call.
    check("remove_header_map_value", unsafe { proxy_remove_header_map_value(kind, name.as_ptr(), name.len()) })
}

/// A property by its NUL-separated path (see [`crate::proxy::ProxyHost::property`]).
pub fn property(path: &[u8]) -> HostResult<Option<Vec<u8>>> {
    let (mut data, mut size) = (null_mut(), 0usize);
    // SAFETY: as in `buffer`.
    match unsafe { proxy_get_property(path.as_ptr(), path.len(), &mut data, &mut size) } {
        OK => Ok(take_bytes(data, size)),
        NOT_FOUND => Ok(None),
        status => Err(HostError { call: "get_property", status }),
    }
}

/// A shared-data value and its CAS version; `(None, None)` for a key never written.
pub fn shared_data(key: &str) -> HostResult<(Option<Vec<u8>>, Option<u32>)> {
    let (mut data, mut size, mut cas) = (null_mut(), 0usize, 0u32);
    // SAFETY: as in `buffer`.
    match unsafe { proxy_get_shared_data(key.as_ptr(), key.len(), &mut data, &mut size, &mut cas) } {
        OK => Ok((take_bytes(data, size), (cas != 0).then_some(cas))),
        NOT_FOUND => Ok((None, None)),
        status => Err(HostError { call: "get_shared_data", status }),
    }
}

/// Writes a shared-data value; `Ok(false)` when the CAS version no longer matched.
pub fn set_shared_data(key: &str, value: &[u8], cas: u32) -> HostResult<bool> {
    // SAFETY: both slices outlive the call.
    match unsafe { proxy_set_shared_data(key.as_ptr(), key.len(), value.as_ptr(), value.len(), cas) } {
        OK => Ok(true),
        CAS_MISMATCH => Ok(false),
        status => Err(HostError { call: "set_shared_data", status }),
    }
}

pub fn register_queue(name: &str) -> HostResult<u32> {
    let mut id = 0u32;
    // SAFETY: `name` outlives the call; the host writes one u32.
    check("register_shared_queue", unsafe { proxy_register_shared_queue(name.as_ptr(), name.len(), &mut id) })?;
    Ok(id)
}

pub fn resolve_queue(vm_id: &str, name: &str) -> HostResult<Option<u32>> {
    let mut id = 0u32;
    // SAFETY: both slices outlive the call; the host writes one u32.
    match unsafe { proxy_resolve_shared_queue(vm_id.as_ptr(), vm_id.len(), name.as_ptr(), name.len(), &mut id) } {
        OK => Ok(Some(id)),
        NOT_FOUND => Ok(None),
        status => Err(HostError { call: "resolve_shared_queue", status }),
    }
}

pub fn dequeue(id: u32) -> HostResult<Option<Vec<u8>>> {
    let (mut data, mut size) = (null_mut(), 0usize);
    // SAFETY: as in `buffer`.
    match unsafe { proxy_dequeue_shared_queue(id, &mut data, &mut size) } {
        OK => Ok(take_bytes(data, size)),
        EMPTY => Ok(None),
        status => Err(HostError { call: "dequeue_shared_queue", status }),
    }
}

pub fn enqueue(id: u32, value: &[u8]) -> HostResult<()> {
    // SAFETY: `value` outlives the call.
    check("enqueue_shared_queue", unsafe { proxy_enqueue_shared_queue(id, value.as_ptr(), value.len()) })
}

/// Sends a local reply; `headers` in the ABI's serialized map form.
pub fn send_local_response(status: u32, headers: &[u8], body: &[u8]) -> HostResult<()> {
    // SAFETY: all slices outlive the call; -1 means "not gRPC".
    let result = unsafe {
        proxy_send_local_response(status, null(), 0, body.as_ptr(), body.len(), headers.as_ptr(), headers.len(), -1)
    };
    check("send_local_response", result)
}

pub fn define_metric(kind: u32, name: &str) -> HostResult<u32> {
    let mut id = 0u32;
    // SAFETY: `name` outlives the call; the host writes one u32.
    check("define_metric", unsafe { proxy_define_metric(kind, name.as_ptr(), name.len(), &mut id) })?;
    Ok(id)
}

pub fn increment_metric(id: u32, offset: i64) -> HostResult<()> {
    // SAFETY: plain value arguments.
    check("increment_metric", unsafe { proxy_increment_metric(id, offset) })
}

pub fn record_metric(id: u32, value: u64) -> HostResult<()> {
    // SAFETY: plain value arguments.
    check("record_metric", unsafe { proxy_record_metric(id, value) })
}

/// Resumes a paused stream (`stream`: 0 = request, 1 = response) of the effective context.
pub fn continue_stream(stream: u32) -> HostResult<()> {
    // SAFETY: plain value argument.
    check("continue_stream", unsafe { proxy_continue_stream(stream) })
}

/// Makes `context_id` the context later stream calls act on (from the root context's tick).
pub fn set_effective_context(context_id: u32) -> HostResult<()> {
    // SAFETY: plain value argument.
    check("set_effective_context", unsafe { proxy_set_effective_context(context_id) })
}
