//! `make run`: four simulated vLLM pods and Envoy with wasm-epp, until Ctrl-C.
//!
//! Ports come from the environment: `POD_PORTS` (default `8001,8002,8003,8004`),
//! `LISTEN_PORT` (10000), `ADMIN_PORT` (9901); `SIM_ARGS` adds simulator flags.
//! `REPLICAS=N` (N > 1) runs N wasm-epp Envoys on free ports behind a round-robin front
//! Envoy on `LISTEN_PORT`, sharing their decisions (`PEERING=0` turns that off;
//! `PEER_SECRET` sets the shared secret, at least 16 visible ASCII characters).
//! `POOLS=llama,qwen` splits the pods into named pools behind the one Envoy, each pod
//! serving its pool's name as its model, a request choosing its pool with an `x-pool` header
//! (docs/deployment.md, "Several pools behind one Envoy").

use std::sync::mpsc;
use std::time::Duration;

use launcher::config_watch::ConfigWatch;
use launcher::envoy::{Envoy, EnvoyOptions, ServedPool, SERVED_ENDPOINT_HEADER};
use launcher::pods::Pod;
use launcher::replicas::{ReplicaPlan, Replicas};

/// How often `make run` looks at its configuration file for a change.
const CONFIG_POLL: Duration = Duration::from_millis(500);

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn parse_port(name: &str, text: &str) -> Result<u16, String> {
    text.trim().parse().map_err(|_| format!("{name}: '{text}' is not a port"))
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

/// `count` wasm-epp Envoys behind a round-robin front Envoy on `listen_port`.
fn start_replicas(
    pool: &[String],
    count: usize,
    listen_port: u16,
    admin_port: u16,
    dir: &std::path::Path,
) -> Result<Replicas, String> {
    let peering = env_or("PEERING", "1") != "0";
    let mut plan = ReplicaPlan::new(pool, count, peering)?;
    if let Ok(secret) = std::env::var("PEER_SECRET") {
        plan.secret = secret;
    }
    let mut replicas = Vec::with_capacity(count);
    for index in 0..count {
        let envoy = plan.start_replica(index, dir)?;
        let ports = plan.ports.get(index).copied().ok_or("no ports")?;
        println!(
            "replica  127.0.0.1:{}  admin {}  peer {}  (log .run/replica-{index}/envoy.log)",
            ports.listen,
            ports.admin,
            if peering { ports.peer_address() } else { "off".into() }
        );
        if !envoy.wait_for_healthy_pods(pool.len() as u64, Duration::from_secs(10)) {
            println!("warning: replica {index} does not see every pod healthy yet");
        }
        replicas.push(Some(envoy));
    }
    let front = plan.start_front_on(dir, listen_port, admin_port)?;
    println!("envoy    127.0.0.1:{listen_port}  (round robin over the {count} replicas, log .run/front/)");
    Ok(Replicas { plan, replicas, front })
}

/// The request header that chooses a pool with `POOLS`.
const POOL_HEADER: &str = "x-pool";

/// `POOLS=a,b`: the pool names (DNS labels; the plugin checks them), none when unset.
fn pool_names() -> Vec<String> {
    env_or("POOLS", "").split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect()
}

/// The pods split in order into one pool per name, each pod serving its pool's name as model.
fn start_pools(
    names: &[String],
    ports: &[u16],
    sim_args: &[&str],
    dir: &std::path::Path,
) -> Result<(Vec<Pod>, Vec<ServedPool>), String> {
    if ports.len() < names.len() {
        return Err(format!("POOLS: {} pools need at least as many POD_PORTS", names.len()));
    }
    let (mut pods, mut pools) = (Vec::new(), Vec::new());
    for (index, name) in names.iter().enumerate() {
        let mut args = sim_args.to_vec();
        args.extend(["--model", name.as_str()]);
        let share = ports.iter().skip(index).step_by(names.len());
        let members: Vec<Pod> = share.map(|port| Pod::start(*port, &args, dir)).collect::<Result<_, _>>()?;
        for pod in &members {
            println!("pod      {}  (pool {name}, model {name}, log .run/pod-{}.log)", pod.address(), pod.port);
        }
        pools.push(ServedPool::by_header(name, &members.iter().map(Pod::address).collect::<Vec<_>>(), POOL_HEADER));
        pods.extend(members);
    }
    Ok((pods, pools))
}

fn run() -> Result<(), String> {
    let pod_ports: Vec<u16> = env_or("POD_PORTS", "8001,8002,8003,8004")
        .split(',')
        .map(|p| parse_port("POD_PORTS", p))
        .collect::<Result<_, _>>()?;
    let listen_port = parse_port("LISTEN_PORT", &env_or("LISTEN_PORT", "10000"))?;
    let admin_port = parse_port("ADMIN_PORT", &env_or("ADMIN_PORT", "9901"))?;
    let sim_args = env_or("SIM_ARGS", "");
    let sim_args: Vec<&str> = sim_args.split_whitespace().collect();
    let dir = launcher::paths::workspace_root().join(".run");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;

    let names = pool_names();
    let replicas: usize = env_or("REPLICAS", "1").trim().parse().map_err(|_| "REPLICAS: not a number".to_string())?;
    let mut live = None;
    // The pool the suggested request names (with POOLS), else none.
    let (pods, gateway, tried_pool) = if !names.is_empty() {
        if replicas > 1 {
            return Err("POOLS and REPLICAS: one at a time in make run".into());
        }
        let (pods, pools) = start_pools(&names, &pod_ports, &sim_args, &dir)?;
        let envoy = Envoy::start(&EnvoyOptions::for_pools(pools, listen_port, admin_port), &dir)?;
        println!(
            "envoy    127.0.0.1:{listen_port}  ({} pools, chosen by the {POOL_HEADER} header; log .run/envoy.log)",
            names.len()
        );
        println!(
            "admin    http://127.0.0.1:{admin_port}/stats/prometheus  (wasm_epp_* stats, labelled pool=\"<name>\")"
        );
        (pods, Gateway::One(envoy), names.first().cloned())
    } else {
        let mut pods = Vec::new();
        for port in &pod_ports {
            pods.push(Pod::start(*port, &sim_args, &dir)?);
            println!("pod      127.0.0.1:{port}  (simulated vLLM, log .run/pod-{port}.log)");
        }
        let pool: Vec<String> = pods.iter().map(Pod::address).collect();
        let gateway = if replicas > 1 {
            Gateway::Replicas(start_replicas(&pool, replicas, listen_port, admin_port, &dir)?)
        } else {
            let mut options = EnvoyOptions::for_pool(&pool, listen_port, admin_port);
            options.live_filter_dir = Some(dir.join("live-filter"));
            options.access_log = Some(dir.join("access.log"));
            let envoy = Envoy::start(&options, &dir)?;
            let watch = ConfigWatch::create(&dir.join("filter-config.json"), &options.filter_config)?;
            println!(
                "config   {}  (the filter's configuration: save a change and it is applied live)",
                watch.path().display()
            );
            live = Some((watch, options));
            println!(
                "envoy    127.0.0.1:{listen_port}  (wasm-epp filter + singleton, log .run/envoy.log, config .run/envoy.yaml)"
            );
            println!("admin    http://127.0.0.1:{admin_port}/stats/prometheus  (wasm_epp_* stats)");
            println!(
                "access   .run/access.log  (a JSON line per request: the pod picked, the pod that answered, timings)"
            );
            if !envoy.wait_for_healthy_pods(pool.len() as u64, Duration::from_secs(10)) {
                println!("warning: the singleton does not see every pod healthy yet; requests still route (fail open)");
            }
            Gateway::One(envoy)
        };
        (pods, gateway, None)
    };
    let (pool_header, model) = match &tried_pool {
        Some(pool) => (format!("-H '{POOL_HEADER}: {pool}' "), pool.as_str()),
        None => (String::new(), "sim-model"),
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
    println!("stopping envoy and {} pods", pods.len());
    gateway.stop();
    drop(pods);
    Ok(())
}

/// What `--help` prints: everything is set through the environment.
const USAGE: &str = "wasm-epp-launch (make run): simulated vLLM pods and Envoy with wasm-epp, until Ctrl-C.

Takes no arguments; the environment sets it up:
  POD_PORTS    pod ports on 127.0.0.1, comma-separated (default 8001,8002,8003,8004)
  LISTEN_PORT  Envoy's listener (default 10000)
  ADMIN_PORT   Envoy's admin interface (default 9901)
  SIM_ARGS     extra simulator flags (vllm-sim --help lists them)
  REPLICAS     N > 1 runs N wasm-epp Envoys behind a round-robin front Envoy
  PEERING      0 keeps those replicas from sharing their decisions (default 1)
  PEER_SECRET  the replicas' shared secret (at least 16 visible ASCII characters)
  POOLS        names (e.g. llama,qwen): the pods split into pools behind one Envoy, each
               pod serving its pool's name as model, the pool chosen by an x-pool header
               (no live configuration file or access log then)

The filter's configuration is written to .run/filter-config.json; a saved change applies live.";

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
