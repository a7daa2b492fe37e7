//! Keeps the seam honest: the crates that run inside Envoy call the host only through
//! `wasm_epp_host`, never through the SDK helpers that panic (proxy-wasm 0.2.5's
//! `hostcalls` wrappers `panic!` on unexpected statuses and its map helpers unwrap UTF-8;
//! one Latin-1 header byte once killed a worker's VM that way).

// Test support functions unwrap and slice too: a failure is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

/// Crates whose code runs in a Wasm VM inside Envoy (plus the benchmark's baseline filter).
const WASM_CRATES: [&str; 7] = ["picker", "host", "router", "poller", "filter", "shared-state", "bench/header-filter"];

/// The files allowed to call the ABI and `hostcalls` (the dispatch wrapper: see proxy.rs).
const SEAM_FILES: [&str; 2] = ["host/src/abi.rs", "host/src/proxy.rs"];

/// SDK calls that can panic inside the VM: the `Context`/`HttpContext`/`RootContext` trait
/// helpers unwrap host results, and `hostcalls::*` panics on statuses it did not expect.
const PANICKING_SDK_CALLS: [&str; 20] = [
    "hostcalls::",
    "get_http_request_header",
    "set_http_request_header",
    "add_http_request_header",
    "get_http_response_header",
    "set_http_response_header",
    "get_http_request_body",
    "get_http_response_body",
    "get_http_call_response_header",
    "get_http_call_response_body",
    "self.get_shared_data",
    "self.set_shared_data",
    "self.dispatch_http_call",
    "send_http_response",
    "self.get_property",
    "get_plugin_configuration",
    "self.set_tick_period",
    "self.register_shared_queue",
    "self.resolve_shared_queue",
    "self.get_current_time",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "target") {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn wasm_crate_sources() -> Vec<(String, String)> {
    let root = workspace_root();
    let mut files = Vec::new();
    for krate in WASM_CRATES {
        rust_files(&root.join(krate).join("src"), &mut files);
    }
    assert!(files.len() > 40, "found only {} source files under {}", files.len(), root.display());
    files
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(&root).unwrap_or(&path).to_string_lossy().into_owned();
            (relative, std::fs::read_to_string(&path).unwrap())
        })
        .collect()
}

/// The lines of `text` outside `#[cfg(test)]` modules that are not comments.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let cut = text.find("#[cfg(test)]").unwrap_or(text.len());
    text[..cut]
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .map(|(n, line)| (n + 1, line))
        .collect()
}

#[test]
fn only_the_seam_calls_the_host() {
    let mut offences = Vec::new();
    for (file, text) in wasm_crate_sources() {
        if SEAM_FILES.contains(&file.as_str()) {
            continue;
        }
        for (line_number, line) in code_lines(&text) {
            for call in PANICKING_SDK_CALLS {
                if line.contains(call) {
                    offences.push(format!("{file}:{line_number}: {call}"));
                }
            }
        }
    }
    assert!(offences.is_empty(), "host calls outside the seam:\n{}", offences.join("\n"));
}

#[test]
fn unsafe_code_lives_in_the_abi_module_only() {
    let mut offences = Vec::new();
    for (file, text) in wasm_crate_sources() {
        if file == "host/src/abi.rs" {
            continue;
        }
        for (line_number, line) in code_lines(&text) {
            if line.contains("unsafe ") || line.contains("unsafe{") || line.contains("allow(unsafe_code)") {
                offences.push(format!("{file}:{line_number}"));
            }
        }
    }
    assert!(offences.is_empty(), "unsafe code outside host/src/abi.rs:\n{}", offences.join("\n"));
}

#[test]
fn the_seam_itself_uses_only_the_non_panicking_dispatch_wrapper() {
    let proxy = std::fs::read_to_string(workspace_root().join("host/src/proxy.rs")).unwrap();
    let calls: Vec<&str> = proxy.matches("hostcalls::").collect();
    assert_eq!(calls.len(), 1, "host/src/proxy.rs may call hostcalls:: only for dispatch_http_call");
    assert!(proxy.contains("hostcalls::dispatch_http_call"));
}
