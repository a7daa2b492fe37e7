//! `make run`: four simulated vLLM pods and Envoy with wasm-epp, until Ctrl-C.
//!
//! Ports come from the environment: `POD_PORTS` (default `8001,8002,8003,8004`),
//! `LISTEN_PORT` (10000), `ADMIN_PORT` (9901); `SIM_ARGS` adds simulator flags.
//! `POD_ADDRESSES=ip:port,...` starts no simulator and puts Envoy in front of pods that run
//! already; `FILTER_CONFIG=path.json` starts the filter with that configuration over
//! `make run`'s pool; `POD_ROLES=prefill,decode,...` makes a prefill/decode pool
//! (launcher::run_setup reads and checks all of it).
//! `REPLICAS=N` (N > 1) runs N wasm-epp Envoys on free ports behind a round-robin front
//! Envoy on `LISTEN_PORT`, sharing their decisions (`PEERING=0` turns that off;
//! `PEER_SECRET` sets the shared secret, at least 16 visible ASCII characters).
//! `POOLS=llama,qwen` splits the pods into named pools behind the one Envoy, each pod
//! serving its pool's name as its model, a request choosing its pool with an `x-pool` header
//! (docs/deployment.md, "Several pools behind one Envoy").

use std::sync::mpsc;
use std::time::Duration;

use launcher::config_watch::ConfigWatch;
use launcher::envoy::{Envoy, SERVED_ENDPOINT_HEADER};
use launcher::pods::Pod;
use launcher::replicas::{ReplicaPlan, Replicas};
use launcher::run_setup::{role_name, RunSetup, POOL_HEADER};

/// How often `make run` looks at its configuration file for a change.
const CONFIG_POLL: Duration = Duration::from_millis(500);

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// What `make run` started in front of the pods; stopped (by pid) when dropped.
enum Gateway {
    One(Envoy),
    Replicas(Replicas),
}

impl Gateway {
    /// Stops every Envoy by pid (the replicas, then the front, when the set is dropped).
    fn stop(self) {
        match self {
            Gateway::One(mut envoy) => envoy.stop(),
            Gateway::Replicas(set) => drop(set),
        }
    }
}

/// `setup.replicas` wasm-epp Envoys behind a round-robin front Envoy on its listen port.
fn start_replicas(setup: &RunSetup, dir: &std::path::Path) -> Result<Replicas, String> {
    let (pool, count) = (&setup.pool, setup.replicas);
    let peering = env_or("PEERING", "1") != "0";
    let mut plan = ReplicaPlan::new(pool, count, peering)?;
    if let Ok(secret) = std::env::var("PEER_SECRET") {
        plan.secret = secret;
    }
    let mut replicas = Vec::with_capacity(count);
    for index in 0..count {
        let envoy = plan.start_replica_with(index, dir, |options| setup.configure(options))?;
        let ports = plan.ports.get(index).copied().ok_or("no ports")?;
        println!(
            "replica  127.0.0.1:{}  (stats {}, peer {}, log .run/replica-{index}/envoy.log)",
            ports.listen,
            ports.stats_url(),
            if peering { ports.peer_address() } else { "off".into() }
        );
        if !envoy.wait_for_healthy_pods(pool.len() as u64, Duration::from_secs(10)) {
            println!("warning: replica {index} does not see every pod healthy yet");
        }
        replicas.push(Some(envoy));
    }
    let (listen_port, admin_port) = (setup.listen_port, setup.admin_port);
    let front = plan.start_front_on(dir, listen_port, admin_port)?;
    println!("envoy    127.0.0.1:{listen_port}  (round robin over the {count} replicas, log .run/front/)");
    println!(
        "admin    http://127.0.0.1:{admin_port}  (the front Envoy's: no wasm_epp_* stats; each replica's are on its \
         stats line above)"
    );
    Ok(Replicas { plan, replicas, front })
}

/// Starts every simulated pod, in order (none with `POD_ADDRESSES`: those are only listed).
fn start_pods(setup: &RunSetup, dir: &std::path::Path) -> Result<Vec<Pod>, String> {
    let role = |index: usize| setup.roles.get(index).map_or(String::new(), |r| format!("role {}, ", role_name(*r)));
    if setup.pods_run_already() {
        for (index, address) in setup.pool.iter().enumerate() {
            println!("pod      {address}  ({}yours: make run neither starts nor stops it)", role(index));
        }
    }
    let mut pods = Vec::with_capacity(setup.sim_ports.len());
    for (index, port) in setup.sim_ports.iter().enumerate() {
        let args = setup.pod_args(index);
        pods.push(Pod::start(*port, &args.iter().map(String::as_str).collect::<Vec<_>>(), dir)?);
        let what = match setup.pool_of(index) {
            Some(name) => format!("pool {name}, model {name}"),
            None => "simulated vLLM".to_string(),
        };
        println!("pod      127.0.0.1:{port}  ({what}, {}log .run/pod-{port}.log)", role(index));
    }
    if !setup.roles.is_empty() {
        let pd = setup.envoy_options().filter_config.get("pd").cloned().unwrap_or_default();
        println!(
            "pd       the singleton has POD_ROLES' roles; the filter's pd section is {pd} (docs/configuration.md)"
        );
    }
    Ok(pods)
}

/// The first model the first pod lists, to name in the suggested request; a placeholder if
/// it lists none (or wants an API key).
fn served_model(pool: &[String]) -> String {
    let answer = pool
        .first()
        .and_then(|pod| launcher::http::get(&format!("http://{pod}/v1/models"), Duration::from_secs(2)).ok());
    answer.and_then(|reply| launcher::run_setup::first_model(&reply.body)).unwrap_or_else(|| "<your model>".into())
}

fn run() -> Result<(), String> {
    let setup = RunSetup::from_env(|name| std::env::var(name).ok())?;
    let (listen_port, admin_port) = (setup.listen_port, setup.admin_port);
    let dir = launcher::paths::workspace_root().join(".run");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;

    let pods = start_pods(&setup, &dir)?;
    // Where the filter's configuration comes from.
    let source = match &setup.filter_file {
        Some(file) => format!("FILTER_CONFIG {} with make run's pool", file.path.display()),
        None => "make run's pool".to_string(),
    };
    if let Some(file) = &setup.filter_file {
        let path = file.path.display();
        if !setup.pool_names.is_empty() {
            println!("filter   FILTER_CONFIG {path}, on each pool's filter with its pods and name");
        } else if setup.replicas > 1 {
            println!("filter   FILTER_CONFIG {path}, on each replica's filter with make run's pool");
        }
    }
    let mut live = None;
    let gateway = if !setup.pool_names.is_empty() {
        let envoy = Envoy::start(&setup.envoy_options(), &dir)?;
        println!(
            "envoy    127.0.0.1:{listen_port}  ({} pools, chosen by the {POOL_HEADER} header; log .run/envoy.log)",
            setup.pool_names.len()
        );
        println!(
            "admin    http://127.0.0.1:{admin_port}/stats/prometheus  (wasm_epp_* stats, labelled pool=\"<name>\")"
        );
        Gateway::One(envoy)
    } else if setup.replicas > 1 {
        Gateway::Replicas(start_replicas(&setup, &dir)?)
    } else {
        let mut options = setup.envoy_options();
        options.live_filter_dir = Some(dir.join("live-filter"));
        options.access_log = Some(dir.join("access.log"));
        let envoy = Envoy::start(&options, &dir)?;
        let watch = ConfigWatch::create(&dir.join("filter-config.json"), &options.filter_config)?;
        println!(
            "config   {}  (the filter's configuration, {source}: save a change and it is applied live)",
            watch.path().display()
        );
        live = Some((watch, options));
        println!(
            "envoy    127.0.0.1:{listen_port}  (wasm-epp filter + singleton, log .run/envoy.log, config .run/envoy.yaml)"
        );
        println!("admin    http://127.0.0.1:{admin_port}/stats/prometheus  (wasm_epp_* stats)");
        println!("access   .run/access.log  (a JSON line per request: the pod picked, the pod that answered, timings)");
        if !envoy.wait_for_healthy_pods(setup.pool.len() as u64, Duration::from_secs(10)) {
            println!("warning: the singleton does not see every pod healthy yet; requests still route (fail open)");
            if setup.pods_run_already() {
                println!("         it scrapes each pod's /metrics: see wasm_epp_poll_failure and .run/envoy.log");
            }
        }
        Gateway::One(envoy)
    };
    // The pool the suggested request names (with POOLS), else none.
    let (pool_header, model) = match setup.pool_names.first() {
        Some(pool) => (format!("-H '{POOL_HEADER}: {pool}' "), pool.clone()),
        None if setup.pods_run_already() => (String::new(), served_model(&setup.pool)),
        None => (String::new(), "sim-model".to_string()),
    };
    println!();
    println!("try:");
    println!(
        "  curl -si http://127.0.0.1:{listen_port}/v1/completions {pool_header}-H 'content-type: application/json' \\\n    -d '{{\"model\":\"{model}\",\"prompt\":\"Hello, my name is\",\"max_tokens\":16}}'"
    );
    println!("  (the {SERVED_ENDPOINT_HEADER} response header names the pod that answered)");
    println!(
        "  curl -s http://127.0.0.1:{listen_port}/v1/models {pool_header} (the pool's models, listed by the gateway)"
    );
    println!();
    println!("Ctrl-C stops everything.");

    let (stop_tx, stop_rx) = mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = stop_tx.send(());
    })
    .map_err(|e| format!("cannot install Ctrl-C handler: {e}"))?;
    // Until Ctrl-C: look at the configuration file twice a second.
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(CONFIG_POLL) {
        if let (Some((watch, options)), Gateway::One(envoy)) = (live.as_mut(), &gateway) {
            if let Some(line) = watch.poll(envoy, options) {
                println!("{line}");
            }
        }
    }
    match setup.pods_run_already() {
        true => println!("stopping envoy (your pods keep running)"),
        false => println!("stopping envoy and {} pods", pods.len()),
    }
    gateway.stop();
    drop(pods);
    Ok(())
}

/// What `--help` prints: everything is set through the environment.
const USAGE: &str = "wasm-epp-launch (make run): simulated vLLM pods and Envoy with wasm-epp, until Ctrl-C.

Takes no arguments; the environment sets it up:
  POD_PORTS    pod ports on 127.0.0.1, comma-separated (default 8001,8002,8003,8004)
  POD_ADDRESSES  pods that run already (e.g. your vLLMs), ip:port comma-separated, IPv6 as
               [addr]:port: no simulator is started, Envoy and its singleton use these
  LISTEN_PORT  Envoy's listener (default 10000)
  ADMIN_PORT   Envoy's admin interface (default 9901)
  SIM_ARGS     extra simulator flags (vllm-sim --help lists them)
  REPLICAS     N > 1 runs N wasm-epp Envoys behind a round-robin front Envoy
  PEERING      0 keeps those replicas from sharing their decisions (default 1)
  PEER_SECRET  the replicas' shared secret (at least 16 visible ASCII characters)
  POOLS        names (e.g. llama,qwen): the pods split into pools behind one Envoy, each
               pod serving its pool's name as model, the pool chosen by an x-pool header
               (no live configuration file or access log then)
  POD_ROLES    prefill, decode or both per pod, in order (e.g. prefill,prefill,decode,decode):
               each simulated pod's --role, the singleton's roles, and the filter's pd section
               (its defaults, unless FILTER_CONFIG sets one): a prefill/decode pool
  FILTER_CONFIG  a JSON file of the filter's configuration to start with (docs/configuration.md),
               e.g. {\"learning\": {\"enabled\": true}}; its fields go over make run's own (the pool
               stays the pods make run points at); checked before anything starts

The filter's configuration is written to .run/filter-config.json; a saved change applies live,
and FILTER_CONFIG=.run/filter-config.json starts the next run with it.";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return;
    }
    if let Some(first) = args.first() {
        eprintln!("wasm-epp-launch: takes no arguments ('{first}'); the environment configures it (--help)");
        std::process::exit(2);
    }
    if let Err(error) = run() {
        eprintln!("wasm-epp-launch: {error}");
        std::process::exit(1);
    }
}
