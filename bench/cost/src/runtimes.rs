//! Which Wasm runtimes this Envoy build can run wasm-epp on, and what each costs.
//!
//! Envoy 1.40 knows four runtime names (`envoy.wasm.runtime.{v8,wamr,wasmtime,null}`), but a
//! build only runs those compiled into it. For each name, wasm-epp's configuration with every
//! VM (filter and singleton) on that runtime is checked by `envoy --mode validate`, which
//! creates the VMs and loads the modules; when it fails, Envoy's log says why. Each runtime that
//! loads then runs plain Envoy, the body-reading filter and wasm-epp side by side, and the
//! latency bench compares them at 4 KB (added p50, Envoy CPU per request).

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::envoys::{self, RunningEnvoy, Setup, Variant};
use crate::latency::{self, LatencyOptions};
use crate::results::Results;
use crate::workload;

/// Every runtime name Envoy 1.40 registers (`strings envoy | grep envoy.wasm.runtime`).
pub const RUNTIMES: [&str; 4] =
    ["envoy.wasm.runtime.v8", "envoy.wasm.runtime.wamr", "envoy.wasm.runtime.wasmtime", "envoy.wasm.runtime.null"];

/// How long `--mode validate` may take (it loads both modules; a second or two here).
const VALIDATE_TIMEOUT: Duration = Duration::from_secs(60);

/// What Envoy logs when a runtime's name is known but its engine was not built in.
const NOT_COMPILED_IN: &str = "compiled without support";

/// The variants compared on each runtime that loads.
const COMPARED: [Variant; 3] = [Variant::Plain, Variant::HeaderRead, Variant::WasmEpp];

/// The body size of the comparison (the goals' size).
const BODY_BYTES: usize = 4096;

/// What `--mode validate` said about one runtime.
#[derive(Debug, Clone, PartialEq)]
pub struct Availability {
    pub runtime: &'static str,
    /// The build has the engine (it may still refuse wasm-epp's modules, as `null` does).
    pub compiled_in: bool,
    /// wasm-epp's filter and singleton load on it.
    pub loads_wasm_epp: bool,
    /// Envoy's own words.
    pub reason: String,
}

/// `v8` of `envoy.wasm.runtime.v8`.
pub fn short_name(runtime: &str) -> &str {
    runtime.rsplit('.').next().unwrap_or(runtime)
}

/// The message of an Envoy log line (`[time][thread][level][logger] [file:line] message`).
fn message(line: &str) -> &str {
    line.rsplit_once("] ").map_or(line, |(_, message)| message).trim()
}

/// Judges a runtime from `--mode validate`'s exit and log.
pub fn classify(runtime: &'static str, validated: bool, log: &str) -> Availability {
    if validated {
        let reason = "wasm-epp's filter and singleton load (envoy --mode validate)".to_owned();
        return Availability { runtime, compiled_in: true, loads_wasm_epp: true, reason };
    }
    let line = |pattern: &str| log.lines().find(|l| l.contains(pattern)).map(message);
    if let Some(reason) = line(NOT_COMPILED_IN) {
        return Availability { runtime, compiled_in: false, loads_wasm_epp: false, reason: reason.to_owned() };
    }
    // The first error names the cause; the critical lines after it only repeat the outcome.
    let reason = line("[error]")
        .or_else(|| line("[critical]"))
        .or_else(|| log.lines().rev().find(|l| !l.trim().is_empty()).map(message))
        .unwrap_or("envoy --mode validate failed without a log");
    Availability { runtime, compiled_in: true, loads_wasm_epp: false, reason: reason.to_owned() }
}

/// Validates wasm-epp's configuration with every VM on `runtime`.
pub fn probe(runtime: &'static str) -> Result<Availability, String> {
    let short = short_name(runtime);
    let dir = launcher::paths::run_dir(&format!("bench-cost-runtime-{short}")).map_err(|e| e.to_string())?;
    let setup = Setup { runtime: Some(runtime.to_owned()), ..Setup::default() };
    // Validation binds nothing and scrapes nothing: any pool and ports do.
    let config = envoys::render(Variant::WasmEpp, &["127.0.0.1:9".to_owned()], 10_000, 10_001, &setup)?;
    let (config_path, log_path) = (dir.join("envoy.yaml"), dir.join("validate.log"));
    std::fs::write(&config_path, config).map_err(|e| format!("{}: {e}", config_path.display()))?;
    let log = std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let stderr = log.try_clone().map_err(|e| e.to_string())?;
    let mut child = Command::new(launcher::paths::envoy_binary())
        .args(["--mode", "validate", "--log-level", "info", "-c"])
        .arg(&config_path)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("envoy --mode validate: {e}"))?;
    let mut status = None;
    launcher::wait_until(VALIDATE_TIMEOUT, || {
        status = child.try_wait().ok().flatten();
        status.is_some()
    });
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("envoy --mode validate on {runtime} did not finish in {VALIDATE_TIMEOUT:?}"));
    };
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    Ok(classify(runtime, status.success(), &text))
}

/// Probes every runtime, prints and records what loads, then compares the runtimes that do.
pub fn run(pool: &[String], options: &LatencyOptions, results: &mut Results) -> Result<(), String> {
    println!("\n== Wasm runtimes of this Envoy build (wasm-epp's configuration, envoy --mode validate) ==");
    println!("  {:<10} {:>12} {:>16}  reason (Envoy's log)", "runtime", "compiled in", "loads wasm-epp");
    let mut loading = Vec::new();
    for runtime in RUNTIMES {
        let found = probe(runtime)?;
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        let short = short_name(runtime);
        println!(
            "  {short:<10} {:>12} {:>16}  {}",
            yes_no(found.compiled_in),
            yes_no(found.loads_wasm_epp),
            found.reason
        );
        results.push("wasm_runtimes", short, "compiled_in", f64::from(u8::from(found.compiled_in)), "bool");
        results.push("wasm_runtimes", short, "loads_wasm_epp", f64::from(u8::from(found.loads_wasm_epp)), "bool");
        if found.loads_wasm_epp {
            loading.push(runtime);
        }
    }
    for runtime in loading {
        compare(runtime, pool, options, results)?;
    }
    Ok(())
}

/// Plain Envoy, the body-reading filter and wasm-epp, every VM on `runtime`, 4 KB bodies.
fn compare(runtime: &str, pool: &[String], options: &LatencyOptions, results: &mut Results) -> Result<(), String> {
    let short = short_name(runtime);
    println!("\n-- on {short}: plain Envoy, the body-reading filter and wasm-epp, {BODY_BYTES} B bodies --");
    let setup = Setup { runtime: Some(runtime.to_owned()), ..Setup::default() };
    let envoys: Vec<RunningEnvoy> =
        COMPARED.iter().map(|&v| RunningEnvoy::start_with(v, pool, &setup)).collect::<Result<_, _>>()?;
    let idle = latency::idle_rates(&envoys);
    let requests: Vec<Vec<Vec<u8>>> = envoys
        .iter()
        .map(|e| latency::encoded(e, "/v1/completions", |seed| workload::completions_body_of_size(BODY_BYTES, seed)))
        .collect();
    let prefix = format!("{short}/");
    let sequential = latency::sequential(&envoys, &requests, options)?;
    latency::report(&envoys, "wasm_runtime_latency_sequential", &prefix, BODY_BYTES, &sequential, &idle, results);
    let concurrent = latency::concurrent(&envoys, &requests, options);
    let benchmark = format!("wasm_runtime_latency_concurrent{}", options.concurrency);
    latency::report(&envoys, &benchmark, &prefix, BODY_BYTES, &concurrent, &idle, results);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Envoy 1.40.0's own lines from `--mode validate` (timestamps shortened).
    const WAMR_LOG: &str = "\
[08:07:14.726][15617][warning][wasm] [source/extensions/common/wasm/wasm_vm.cc:102] Failed to create Wasm VM using envoy.wasm.runtime.wamr runtime. Envoy was compiled without support for it
[08:07:14.726][15617][error][wasm] [source/extensions/common/wasm/wasm.cc:104] Wasm VM failed Failed to load Wasm code
[08:07:14.727][15617][critical][main] [source/server/config_validation/server.cc:76] error initializing configuration 'wamr.yaml': Unable to create Wasm plugin header-only";
    const NULL_LOG: &str = "\
[08:07:14.897][15674][error][wasm] [source/extensions/common/wasm/wasm.cc:104] Wasm VM failed Failed to load NullVM plugin
[08:07:14.897][15674][error][wasm] [source/extensions/common/wasm/wasm.cc:104] Wasm VM failed Failed to load Wasm code
[08:07:14.898][15674][critical][main] [source/server/config_validation/server.cc:76] error initializing configuration 'null.yaml': Unable to create Wasm plugin header-only";

    #[test]
    fn a_runtime_not_built_in_says_so() {
        let wamr = classify("envoy.wasm.runtime.wamr", false, WAMR_LOG);
        assert!(!wamr.compiled_in && !wamr.loads_wasm_epp);
        assert_eq!(
            wamr.reason,
            "Failed to create Wasm VM using envoy.wasm.runtime.wamr runtime. Envoy was compiled without support for it"
        );
    }

    #[test]
    fn the_null_runtime_is_built_in_but_runs_no_wasm_file() {
        let null = classify("envoy.wasm.runtime.null", false, NULL_LOG);
        assert!(null.compiled_in && !null.loads_wasm_epp);
        assert_eq!(null.reason, "Wasm VM failed Failed to load NullVM plugin");
    }

    #[test]
    fn a_validated_runtime_loads() {
        let v8 = classify("envoy.wasm.runtime.v8", true, "");
        assert!(v8.compiled_in && v8.loads_wasm_epp);
        assert_eq!(short_name(v8.runtime), "v8");
    }
}
