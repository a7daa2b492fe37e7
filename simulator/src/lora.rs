//! Which LoRA adapters a pod serves, and how a request's `model` resolves to base or adapter.
//!
//! Mirrors vLLM's serving layer: adapters come from the command line or
//! `POST /v1/load_lora_adapter`, leave with `POST /v1/unload_lora_adapter`, and a request naming
//! neither the base model nor a loaded adapter gets 404. Loading needs LoRA enabled, as vLLM
//! needs `--enable-lora`.

use std::collections::BTreeMap;

use crate::api::errors::ApiError;
use crate::config::MAX_LORA_ADAPTERS;

/// Loaded adapters of one pod.
#[derive(Debug, Clone)]
pub struct LoraRegistry {
    enabled: bool,
    base_model: String,
    /// Adapter name → path it was loaded from.
    adapters: BTreeMap<String, String>,
}

impl LoraRegistry {
    /// A registry for `base_model` with the adapters given at start (loaded from a fake path).
    pub fn new(enabled: bool, base_model: &str, initial: &[String]) -> Self {
        let adapters = initial.iter().map(|name| (name.clone(), format!("/adapters/{name}"))).collect();
        Self { enabled, base_model: base_model.to_owned(), adapters }
    }

    /// Whether LoRA is enabled on this pod.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Resolves a request's `model` field: `Ok(None)` for the base model, `Ok(Some(adapter))`.
    pub fn resolve(&self, model: Option<&str>) -> Result<Option<String>, ApiError> {
        match model {
            None => Ok(None),
            Some(name) if name == self.base_model => Ok(None),
            Some(name) if self.adapters.contains_key(name) => Ok(Some(name.to_owned())),
            Some(name) => Err(ApiError::not_found(format!("The model `{name}` does not exist."))),
        }
    }

    /// Loads an adapter (vLLM: 400 if LoRA is off or the name is taken).
    pub fn load(&mut self, name: &str, path: &str) -> Result<(), ApiError> {
        if !self.enabled {
            return Err(ApiError::bad_request("LoRA is not enabled on this server (start with --enable-lora)."));
        }
        if name.is_empty() || path.is_empty() {
            return Err(ApiError::bad_request("Both 'lora_name' and 'lora_path' must be provided."));
        }
        if name == self.base_model || self.adapters.contains_key(name) {
            return Err(ApiError::bad_request(format!("The lora adapter '{name}' has already been loaded.")));
        }
        if self.adapters.len() >= MAX_LORA_ADAPTERS {
            return Err(ApiError::bad_request(format!("At most {MAX_LORA_ADAPTERS} adapters can be loaded.")));
        }
        self.adapters.insert(name.to_owned(), path.to_owned());
        Ok(())
    }

    /// Unloads an adapter (vLLM: 404 if it is not loaded).
    pub fn unload(&mut self, name: &str) -> Result<(), ApiError> {
        if self.adapters.remove(name).is_none() {
            return Err(ApiError::not_found(format!("The lora adapter '{name}' cannot be found.")));
        }
        Ok(())
    }

    /// Loaded adapters and their paths, sorted by name.
    pub fn adapters(&self) -> impl Iterator<Item = (&String, &String)> {
        self.adapters.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_resolve_to_base_adapter_or_404() {
        let registry = LoraRegistry::new(true, "base", &["a".to_owned()]);
        assert_eq!(registry.resolve(None).unwrap(), None);
        assert_eq!(registry.resolve(Some("base")).unwrap(), None);
        assert_eq!(registry.resolve(Some("a")).unwrap(), Some("a".to_owned()));
        assert_eq!(registry.resolve(Some("zzz")).unwrap_err().status, 404);
    }

    #[test]
    fn load_and_unload_follow_vllm_status_codes() {
        let mut registry = LoraRegistry::new(true, "base", &[]);
        registry.load("b", "/x/b").unwrap();
        assert_eq!(registry.load("b", "/x/b").unwrap_err().status, 400);
        assert_eq!(registry.adapters().count(), 1);
        registry.unload("b").unwrap();
        assert_eq!(registry.unload("b").unwrap_err().status, 404);
        let mut disabled = LoraRegistry::new(false, "base", &[]);
        assert_eq!(disabled.load("c", "/x/c").unwrap_err().status, 400);
    }
}
