//! The answer's headers as `on_response_headers` reads them: one copy of the whole map when
//! the callback looks up [`MAP_FROM`] or more of them, else one lookup per header.
//!
//! Why: in Envoy's V8 a callback's first header lookup costs 2–3.7 µs and each later one
//! ~1.2 µs; a copy of the whole map (vLLM answers with ~8 headers) costs about as much as
//! three cold lookups. With outlier detection on, a 2xx of an inference endpoint looks up
//! the served header, `:status` and `content-type`, and a stream (its opening read for an
//! error event) or an answer learning reads `content-encoding` too. Measured in Envoy
//! (`wasm-epp-bench-cost profile`, six alternated pairs, docs/performance.md "One copy of the
//! answer's headers"): the map instead of four lookups took the callback from 12.2 / 9.2 to
//! 9.8 / 6.7 µs (sequential / 32 at once), lower in every pair; instead of three, 10.5 / 7.1
//! to 10.6 / 6.7 µs, no gain sequentially. So the map from four on.

use std::borrow::Cow;

use wasm_epp_host::{HeaderMap, Host};

/// Header values a callback reads from which one copy of the map is cheaper than the lookups.
pub const MAP_FROM: usize = 4;

/// Where the answer's header values come from for one callback.
pub struct AnswerHeaders<'h> {
    host: &'h dyn Host,
    /// The map, copied once; `None`: each value is looked up by itself (one lookup expected,
    /// or the map could not be read: then every lookup goes on as it would without it).
    map: Option<HeaderMap>,
}

impl<'h> AnswerHeaders<'h> {
    /// `lookups`: how many header values the callback expects to need (a guess; only the
    /// cost depends on it, never a value).
    pub fn read(host: &'h dyn Host, lookups: usize) -> Self {
        let map = (lookups >= MAP_FROM).then(|| host.response_headers().ok()).flatten();
        Self { host, map }
    }

    /// `name`'s first value (`name` lower-case, as Envoy stores names); `None` if the answer
    /// has none or the host could not tell, as a lookup's error has always been taken.
    pub fn get(&self, name: &str) -> Option<Cow<'_, [u8]>> {
        match &self.map {
            Some(map) => map.get(name).map(Cow::Borrowed),
            None => self.host.response_header_value(name).ok().flatten().map(Cow::Owned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_epp_host::MockHost;

    fn calls(host: &MockHost, call: &str) -> u64 {
        host.tally.take().get(call).map_or(0, |count| count.calls)
    }

    #[test]
    fn four_lookups_or_more_read_the_map_once_and_give_the_lookups_values() {
        let host = MockHost::new();
        host.set_response(&[(":status", "200"), ("content-type", "application/json")], b"");
        host.tally.take();
        let headers = AnswerHeaders::read(&host, MAP_FROM);
        assert_eq!(headers.get(":status").as_deref(), Some(&b"200"[..]));
        assert_eq!(headers.get("content-type").as_deref(), Some(&b"application/json"[..]));
        assert_eq!(headers.get("content-encoding"), None, "a missing header is missing");
        let tally = host.tally.take();
        assert_eq!(tally.get("proxy_get_header_map_pairs").map_or(0, |c| c.calls), 1);
        assert_eq!(tally.get("proxy_get_header_map_value").map_or(0, |c| c.calls), 0);
    }

    #[test]
    fn fewer_lookups_stay_lookups() {
        let host = MockHost::new();
        host.set_response(&[(":status", "503"), ("content-type", "application/json")], b"");
        host.tally.take();
        let headers = AnswerHeaders::read(&host, MAP_FROM - 1);
        assert_eq!(headers.get(":status").as_deref(), Some(&b"503"[..]));
        assert_eq!(headers.get("content-type").as_deref(), Some(&b"application/json"[..]));
        assert_eq!(calls(&host, "proxy_get_header_map_value"), 2);
        assert!(AnswerHeaders::read(&host, 0).get("content-encoding").is_none());
        assert_eq!(calls(&host, "proxy_get_header_map_pairs"), 0);
    }
}
