//! A child process that is stopped by its process id when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct ManagedProcess {
    name: String,
    child: Child,
    log: PathBuf,
}

impl ManagedProcess {
    /// Spawns `command` with stdout and stderr appended to `log`.
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> Result<Self, String> {
        let file = std::fs::File::create(log).map_err(|e| format!("{name}: cannot create {}: {e}", log.display()))?;
        let stderr = file.try_clone().map_err(|e| format!("{name}: {e}"))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(stderr))
            .spawn()
            .map_err(|e| format!("{name}: cannot start {:?}: {e}", command.get_program()))?;
        Ok(Self { name: name.to_string(), child, log: log.to_path_buf() })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The process has exited (crashed or stopped).
    pub fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then SIGKILL if it has not exited within two seconds.
    pub fn stop(&mut self) {
        if self.has_exited() {
            return;
        }
        let _ = Command::new("kill").arg("-TERM").arg(self.pid().to_string()).status();
        let exited = crate::wait_until(Duration::from_secs(2), || self.has_exited());
        if !exited {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// SIGKILL at once, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The last `lines` lines of the log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all.iter().skip(all.len().saturating_sub(lines)).copied().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.stop();
    }
}
