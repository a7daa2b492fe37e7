//! Simulated vLLM pods: one `vllm-sim` process per pod, so a test can kill one as a node
//! failure would.

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use crate::http;
use crate::process::ManagedProcess;

pub struct Pod {
    /// Behind a lock so a test can kill or restart a pod while other threads send to it.
    process: Mutex<Option<ManagedProcess>>,
    /// The loopback address the pod binds (127.0.0.1 unless started with [`Pod::start_on`]).
    pub host: String,
    pub port: u16,
    extra_args: Vec<String>,
    dir: std::path::PathBuf,
}

impl Pod {
    /// Starts a pod on 127.0.0.1:`port` with extra simulator flags and waits for /health.
    pub fn start(port: u16, extra_args: &[&str], dir: &Path) -> Result<Self, String> {
        Self::start_on("127.0.0.1", port, extra_args, dir)
    }

    /// Starts a pod on `host:port`. Linux routes all of 127.0.0.0/8 to loopback, so pods
    /// on 127.0.0.2, 127.0.0.3, ... share one port as pods of a Kubernetes pool do.
    pub fn start_on(host: &str, port: u16, extra_args: &[&str], dir: &Path) -> Result<Self, String> {
        let pod = Self {
            process: Mutex::new(None),
            host: host.to_string(),
            port,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            dir: dir.to_path_buf(),
        };
        pod.restart()?;
        Ok(pod)
    }

    /// (Re)starts the process on the same port, like a pod coming back.
    pub fn restart(&self) -> Result<(), String> {
        self.kill_with(ManagedProcess::stop);
        let mut command = Command::new(crate::paths::simulator_binary());
        command.arg("--host").arg(&self.host).arg("--port").arg(self.port.to_string());
        // The plugin learns from `usage.prompt_tokens_details.cached_tokens`, which vLLM (and
        // the simulator) only report with this flag: pods run as the deployment docs ask.
        command.arg("--enable-prompt-tokens-details").args(&self.extra_args);
        let log = match self.host.as_str() {
            "127.0.0.1" => self.dir.join(format!("pod-{}.log", self.port)),
            host => self.dir.join(format!("pod-{host}-{}.log", self.port)),
        };
        let process = ManagedProcess::spawn(&format!("pod {}", self.address()), command, &log)?;
        let tail = || std::fs::read_to_string(&log).unwrap_or_default();
        if let Ok(mut slot) = self.process.lock() {
            *slot = Some(process);
        }
        let healthy = crate::wait_until(Duration::from_secs(15), || {
            http::get(&self.url("/health"), Duration::from_secs(1)).is_ok_and(|r| r.status == 200)
        });
        if !healthy {
            return Err(format!("pod {} did not become healthy:\n{}", self.address(), tail()));
        }
        Ok(())
    }

    /// `ip:port`, `[ip]:port` for an IPv6 host, as the pod writes itself in `x-served-by`.
    pub fn address(&self) -> String {
        vllm_sim::config::host_port(&self.host, self.port)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address())
    }

    /// Stops the pod as a crash would (SIGKILL): connections drop, the port closes.
    pub fn kill(&self) {
        self.kill_with(ManagedProcess::kill);
    }

    fn kill_with(&self, how: fn(&mut ManagedProcess)) {
        let old = self.process.lock().ok().and_then(|mut slot| slot.take());
        if let Some(mut process) = old {
            how(&mut process);
        }
    }

    /// Sets simulator faults (see simulator/README.md, `/sim/faults`).
    pub fn set_faults(&self, faults: &serde_json::Value) -> Result<(), String> {
        let reply = http::post(&self.url("/sim/faults"), &[], &faults.to_string(), Duration::from_secs(5))?;
        if reply.status != 200 {
            return Err(format!("faults refused: {} {}", reply.status, reply.body));
        }
        Ok(())
    }

    /// The simulator's current faults (`GET /sim/faults`).
    pub fn faults(&self) -> Result<serde_json::Value, String> {
        self.get_json("/sim/faults")
    }

    pub fn clear_faults(&self) -> Result<(), String> {
        http::delete(&self.url("/sim/faults"), Duration::from_secs(5)).map(|_| ())
    }

    /// The pod's own counters (`/sim/stats`).
    pub fn stats(&self) -> Result<serde_json::Value, String> {
        self.get_json("/sim/stats")
    }

    /// One of the simulator's `/sim/` JSON answers.
    fn get_json(&self, path: &str) -> Result<serde_json::Value, String> {
        let reply = http::get(&self.url(path), Duration::from_secs(5))?;
        serde_json::from_str(&reply.body).map_err(|e| format!("{path}: {e}"))
    }
}

/// Starts `count` pods on free ports.
pub fn start_pool(count: usize, extra_args: &[&str], dir: &Path) -> Result<Vec<Pod>, String> {
    (0..count)
        .map(|_| {
            let port = crate::free_port().map_err(|e| e.to_string())?;
            Pod::start(port, extra_args, dir)
        })
        .collect()
}
