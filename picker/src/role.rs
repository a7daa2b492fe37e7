//! Pod roles in a prefill/decode (P/D) pool, as llm-d labels them (`llm-d.ai/role`).
//!
//! A role comes from the Kubernetes label or from the static configuration; a pod with neither
//! is `both`, an ordinary pod, so pools without roles route exactly as before.

use serde::{Deserialize, Serialize};

use crate::address::PodAddress;

/// The Kubernetes pod label llm-d uses for a pod's role.
pub const ROLE_LABEL: &str = "llm-d.ai/role";

/// What a pod is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PodRole {
    /// Computes prompts' KV cache for decode pods; never a request's destination under P/D.
    Prefill,
    /// Decodes; its prompts are prefilled elsewhere when the decider says so.
    Decode,
    /// An ordinary pod: prefills and decodes its own requests.
    #[default]
    Both,
}

impl PodRole {
    /// The label value (`prefill`, `decode`, `both`), or `None` for anything else.
    ///
    /// llm-d also writes `prefill-decode` for pods of both kinds; it is read as `both`.
    pub fn from_label(value: &str) -> Option<Self> {
        match value {
            "prefill" => Some(Self::Prefill),
            "decode" => Some(Self::Decode),
            "both" | "prefill-decode" => Some(Self::Both),
            _ => None,
        }
    }

    /// Whether the pod may be a request's destination (decode or both).
    pub fn decodes(self) -> bool {
        self != Self::Prefill
    }

    /// Whether the pod may prefill for another pod (prefill or both).
    pub fn prefills(self) -> bool {
        self != Self::Decode
    }
}

/// Roles by pod address; at most [`crate::pod_table::MAX_PODS`] entries, sorted by address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleMap {
    entries: Vec<(PodAddress, PodRole)>,
}

impl RoleMap {
    /// A map of these roles; later duplicates lose, and entries past the pod bound are dropped.
    pub fn new(mut entries: Vec<(PodAddress, PodRole)>) -> Self {
        entries.truncate(crate::pod_table::MAX_PODS);
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.dedup_by(|later, earlier| later.0 == earlier.0);
        Self { entries }
    }

    /// The pod's role, if this map names it.
    pub fn get(&self, address: &PodAddress) -> Option<PodRole> {
        let found = self.entries.binary_search_by(|(known, _)| known.cmp(address)).ok()?;
        self.entries.get(found).map(|(_, role)| *role)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(text: &str) -> PodAddress {
        PodAddress::parse(text).unwrap()
    }

    #[test]
    fn labels_and_lookups() {
        assert_eq!(PodRole::from_label("prefill"), Some(PodRole::Prefill));
        assert_eq!(PodRole::from_label("prefill-decode"), Some(PodRole::Both));
        assert_eq!(PodRole::from_label("Prefill"), None);
        let map = RoleMap::new(vec![
            (address("10.0.0.2:80"), PodRole::Decode),
            (address("10.0.0.1:80"), PodRole::Prefill),
            (address("10.0.0.2:80"), PodRole::Prefill),
        ]);
        assert_eq!(map.get(&address("10.0.0.1:80")), Some(PodRole::Prefill));
        assert_eq!(map.get(&address("10.0.0.2:80")), Some(PodRole::Decode), "the first entry wins");
        assert_eq!(map.get(&address("10.0.0.3:80")), None);
    }

    #[test]
    fn a_table_without_roles_decodes_as_both() {
        let role: PodRole = serde_json::from_str("\"decode\"").unwrap();
        assert_eq!(role, PodRole::Decode);
        assert!(PodRole::default().decodes() && PodRole::default().prefills());
    }
}
