//! Stopping Envoy without losing a request (envoy/drain-before-exit.sh, the Kubernetes
//! preStop hook). Envoy exits at once on SIGTERM and cuts a stream in flight; drained first
//! by the script, it finishes the stream, serves a request that arrives while it drains (and
//! closes that connection), and the script returns only once nothing is in flight.
//! Envoy runs with `--drain-strategy immediate`, as the Kubernetes manifests start it.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use e2e::drain::{as_the_manifests_run_it, drain_script, in_flight, IN_FLIGHT};
use e2e::hostile::admin_stat;
use e2e::Cluster;
use launcher::http::Reply;

/// ~200 steps of the small preset's ~13 ms: a stream of about 3 s.
const LONG_STREAM: &str = r#"{"model":"sim-model","prompt":"a long answer, please","max_tokens":200,"stream":true}"#;
/// The script's minimum drain, shortened from the manifests' 5 s.
const DRAIN_MIN_SECONDS: u64 = 1;

fn start(name: &str) -> Cluster {
    Cluster::start_ready_with(name, 2, &[], as_the_manifests_run_it)
}

/// Sends the long stream from a thread; returns when Envoy counts it in flight.
fn stream_in_flight(cluster: &Cluster) -> thread::JoinHandle<(Result<Reply, String>, Instant)> {
    let url = cluster.envoy.url("/v1/completions");
    let stream = thread::spawn(move || {
        let reply = launcher::http::post(&url, &[], LONG_STREAM, e2e::REQUEST_TIMEOUT);
        (reply, Instant::now())
    });
    let in_flight = launcher::wait_until(Duration::from_secs(5), || in_flight(&cluster.envoy) >= 1.0);
    assert!(in_flight, "the stream never showed in {IN_FLIGHT}");
    stream
}

fn whole_stream(reply: &Result<Reply, String>) -> bool {
    reply.as_ref().is_ok_and(|r| r.status == 200 && r.body.trim_end().ends_with("data: [DONE]"))
}

/// Envoy's `server.state` while its health check is failed and it drains.
const SERVER_DRAINING: f64 = 1.0;

#[test]
fn sigterm_alone_cuts_a_stream_in_flight() {
    let mut cluster = start("drain-none");
    let stream = stream_in_flight(&cluster);
    Command::new("kill").arg("-TERM").arg(cluster.envoy.pid().to_string()).status().unwrap();
    // At once: well before the stream's ~3 s, and before any SIGKILL.
    let exited = launcher::wait_until(Duration::from_millis(1500), || cluster.envoy.has_exited());
    assert!(exited, "Envoy did not exit on SIGTERM");
    let (reply, _) = stream.join().unwrap();
    assert!(!whole_stream(&reply), "the stream survived a plain SIGTERM: {reply:?}");
}

#[test]
fn a_drained_envoy_finishes_its_streams_before_the_script_lets_it_stop() {
    let mut cluster = start("drain");
    let stream = stream_in_flight(&cluster);
    let drain_started = Instant::now();
    let mut drain = drain_script(cluster.envoy.admin_port, DRAIN_MIN_SECONDS).spawn().unwrap();

    // A request that arrives while Envoy drains (the load balancer has not yet taken the
    // pod out) is served, on a connection Envoy then closes.
    let draining = launcher::wait_until(Duration::from_secs(5), || {
        admin_stat(&cluster.envoy, "server.state") == Some(SERVER_DRAINING)
    });
    assert!(draining, "the script never put Envoy in its draining state");
    let late = cluster.complete("arriving while the gateway drains");
    assert_eq!(late.status, 200, "{}", late.body);
    assert_eq!(late.header("connection"), Some("close"), "draining Envoy kept the connection: {late:?}");

    let status = drain.wait().unwrap();
    let drained_at = Instant::now();
    let (reply, stream_ended) = stream.join().unwrap();
    assert!(whole_stream(&reply), "the stream was cut while draining: {reply:?}");
    assert_eq!(status.code(), Some(0), "the script did not report a drain");
    assert!(drained_at >= stream_ended, "the script returned before the stream ended");
    assert!(drained_at - drain_started >= Duration::from_secs(DRAIN_MIN_SECONDS), "it did not wait its minimum");
    assert_eq!(admin_stat(&cluster.envoy, IN_FLIGHT), Some(0.0));
    println!(
        "drained in {:.1} s, the stream ended {:.1} s after the drain began",
        (drained_at - drain_started).as_secs_f64(),
        (stream_ended - drain_started).as_secs_f64()
    );
    // Then the SIGTERM finds nothing to cut.
    cluster.envoy.stop();
    assert!(cluster.envoy.has_exited());
}

#[test]
fn the_script_reports_an_admin_it_cannot_reach() {
    let unused = launcher::free_port().unwrap();
    let status = drain_script(unused, 0).status().unwrap();
    assert_eq!(status.code(), Some(2), "nothing answers on {unused}: the script must say it drained nothing");
}
