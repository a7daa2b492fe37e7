//! `make run`'s live configuration: the filter's configuration sits in a file
//! (`.run/filter-config.json`); each time it is saved, the new content is handed to Envoy
//! ([`crate::live_config`]) and the outcome printed. A file that is not JSON never reaches
//! Envoy; one the plugin refuses is rejected by Envoy and the old configuration stays.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::envoy::{Envoy, EnvoyOptions};
use crate::live_config::{apply, Applied};

pub struct ConfigWatch {
    path: PathBuf,
    /// Modification time last looked at.
    seen: Option<SystemTime>,
    /// The configuration Envoy runs with (a save without a change is not re-sent).
    current: serde_json::Value,
}

impl ConfigWatch {
    /// Writes `initial` to `path` (pretty JSON, for editing) and watches it from now on.
    pub fn create(path: &Path, initial: &serde_json::Value) -> Result<Self, String> {
        let text = serde_json::to_string_pretty(initial).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        let seen = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        Ok(Self { path: path.to_path_buf(), seen, current: initial.clone() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Looks at the file once; if it was saved with a new configuration, applies it and
    /// returns what happened, to print.
    pub fn poll(&mut self, envoy: &Envoy, options: &EnvoyOptions) -> Option<String> {
        let modified = std::fs::metadata(&self.path).and_then(|m| m.modified()).ok();
        if modified == self.seen {
            return None;
        }
        self.seen = modified;
        let text = std::fs::read_to_string(&self.path).ok()?;
        let config: serde_json::Value = match serde_json::from_str(&text) {
            Ok(config) => config,
            Err(error) => {
                return Some(format!("config: {} is not JSON ({error}); the running one stays", self.path.display()))
            }
        };
        if config == self.current {
            return None;
        }
        Some(match apply(envoy, options, &config) {
            Ok(Applied::Accepted) => {
                self.current = config;
                "config: applied (no restart; requests in flight finish on the old one)".to_string()
            }
            Ok(Applied::Refused(reason)) => format!("config: refused, the running one stays: {reason}"),
            Err(error) => format!("config: {error}"),
        })
    }
}
