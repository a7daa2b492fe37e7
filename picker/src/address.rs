//! A pod address as the filter writes it into the destination header.
//!
//! Every address the filter can ever emit passes through [`PodAddress::parse`], so a
//! malformed or hostile string from configuration or from a client can never become a
//! destination: only literal `ip:port` pairs with a non-zero port exist as values.

use std::fmt::{self, Write as _};
use std::net::SocketAddr;

/// A literal `ip:port` of a pod, in canonical text form (`[v6]:port` for IPv6).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodAddress(String);

impl PodAddress {
    /// Parses `ip:port`; host names are refused because ORIGINAL_DST needs a literal address.
    pub fn parse(text: &str) -> Result<Self, String> {
        let socket: SocketAddr = text.trim().parse().map_err(|_| format!("'{text}' is not a literal ip:port"))?;
        if socket.port() == 0 {
            return Err(format!("'{text}' has port 0"));
        }
        // Sized for the text: addresses arrive canonical (the table stores them so), and the
        // canonical form then fits in one allocation; `to_string` grew it octet by octet (the
        // table's decode parses every pod's address each time a table is published).
        let mut canonical = String::with_capacity(text.trim().len());
        write!(canonical, "{socket}").map_err(|_| format!("'{text}' is not a literal ip:port"))?;
        Ok(Self(canonical))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl serde::Serialize for PodAddress {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// Deserializing validates: a value that is not a literal `ip:port` is an error, so an
/// address read from shared data is as trustworthy as one parsed from configuration.
impl<'de> serde::Deserialize<'de> for PodAddress {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl PartialEq<str> for PodAddress {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

// Hash and Eq are the text's (derived on the one field), so maps keyed by address can be
// searched with a `&str`.
impl std::borrow::Borrow<str> for PodAddress {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PodAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonicalises_literal_addresses() {
        assert_eq!(PodAddress::parse(" 10.0.0.7:8000 ").map(|a| a.0), Ok("10.0.0.7:8000".into()));
        assert_eq!(PodAddress::parse("[::1]:80").map(|a| a.0), Ok("[::1]:80".into()));
    }

    #[test]
    fn refuses_names_ports_and_garbage() {
        for bad in ["pod-1:8000", "10.0.0.7", "10.0.0.7:0", "10.0.0.7:99999", "", "1.2.3.4:80,5.6.7.8:80"] {
            assert!(PodAddress::parse(bad).is_err(), "{bad} accepted");
        }
    }
}
