//! Simulated vLLM pods: one `vllm-sim` process per pod, so a test can kill one as a node
//! failure would.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::http;
use crate::process::ManagedProcess;

pub struct Pod {
    process: Option<ManagedProcess>,
    pub port: u16,
    extra_args: Vec<String>,
    dir: std::path::PathBuf,
}

impl Pod {
    /// Starts a pod on 127.0.0.1:`port` with extra simulator flags and waits for /health.
    pub fn start(port: u16, extra_args: &[&str], dir: &Path) -> Result<Self, String> {
        let mut pod = Self {
            process: None,
            port,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            dir: dir.to_path_buf(),
        };
        pod.restart()?;
        Ok(pod)
    }

    /// (Re)starts the process on the same port, like a pod coming back.
    pub fn restart(&mut self) -> Result<(), String> {
        if let Some(mut old) = self.process.take() {
            old.stop();
        }
        let mut command = Command::new(crate::paths::simulator_binary());
        command.arg("--host").arg("127.0.0.1").arg("--port").arg(self.port.to_string()).args(&self.extra_args);
        let log = self.dir.join(format!("pod-{}.log", self.port));
        let process = ManagedProcess::spawn(&format!("pod {}", self.port), command, &log)?;
        self.process = Some(process);
        let healthy = crate::wait_until(Duration::from_secs(15), || {
            http::get(&self.url("/health"), Duration::from_secs(1)).is_ok_and(|r| r.status == 200)
        });
        if !healthy {
            let tail = self.process.as_ref().map(|p| p.log_tail(20)).unwrap_or_default();
            return Err(format!("pod {} did not become healthy:\n{tail}", self.port));
        }
        Ok(())
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Stops the pod as a crash would (SIGKILL): connections drop, the port closes.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
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

    pub fn clear_faults(&self) -> Result<(), String> {
        http::delete(&self.url("/sim/faults"), Duration::from_secs(5)).map(|_| ())
    }

    /// The pod's own counters (`/sim/stats`).
    pub fn stats(&self) -> Result<serde_json::Value, String> {
        let reply = http::get(&self.url("/sim/stats"), Duration::from_secs(5))?;
        serde_json::from_str(&reply.body).map_err(|e| format!("stats: {e}"))
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
