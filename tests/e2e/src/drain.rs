//! Draining an Envoy before it stops, as the Kubernetes manifests do (docs/deployment.md,
//! "Rollouts without lost requests"): the start flag they use, the preStop hook's script,
//! and the gauge it waits on.

use std::process::Command;

use launcher::envoy::{Envoy, EnvoyOptions};

use crate::hostile::admin_stat;

/// Requests in flight on the inference listener: what the script waits to see at 0.
pub const IN_FLIGHT: &str = "http.inference.downstream_rq_active";

/// Envoy as the manifests start it: a drain closes every connection after its current
/// answer at once, not gradually.
pub fn as_the_manifests_run_it(options: &mut EnvoyOptions) {
    options.extra_args = vec!["--drain-strategy".into(), "immediate".into()];
}

/// `envoy/drain-before-exit.sh` against the admin on 127.0.0.1:`admin_port`, serving at
/// least `min_seconds` and waiting at most a minute.
pub fn drain_script(admin_port: u16, min_seconds: u64) -> Command {
    let mut command = Command::new("bash");
    command
        .arg(launcher::paths::workspace_root().join("envoy/drain-before-exit.sh"))
        .env("ENVOY_ADMIN", format!("127.0.0.1:{admin_port}"))
        .env("DRAIN_MIN_SECONDS", min_seconds.to_string())
        .env("DRAIN_MAX_SECONDS", "60");
    command
}

/// [`IN_FLIGHT`] of `envoy` (0 when the admin does not say).
pub fn in_flight(envoy: &Envoy) -> f64 {
    admin_stat(envoy, IN_FLIGHT).unwrap_or(0.0)
}
