//! The request's path as the pod will see it. A route may rewrite the path after the plugin
//! ran (Envoy's `prefix_rewrite`, Istio's `rewrite.uri`): a pool chosen by a path prefix gets
//! `/llama/v1/chat/completions`, which its pods receive as `/v1/chat/completions`. The
//! filter's `path_prefix` names that prefix, so the endpoints and the paths the gateway answers
//! itself (health, the model list, a stored response's) are recognised behind it.

/// `path` without `prefix` when it begins with it as whole segments (`/llama` takes
/// `/llama/v1/completions`, not `/llamas/v1/completions`); the bare prefix, with or without a
/// query, reads as `/`. Any other path is as it came (a route that does not rewrite), and so is
/// every path with an empty `prefix`.
pub fn strip_path_prefix<'a>(path: &'a str, prefix: &str) -> &'a str {
    if prefix.is_empty() {
        return path;
    }
    match path.strip_prefix(prefix) {
        Some(rest) if rest.starts_with('/') => rest,
        Some(rest) if rest.is_empty() || rest.starts_with('?') => "/",
        _ => path,
    }
}

/// A `path_prefix` setting is empty, or an absolute path of visible ASCII without a query or
/// a trailing `/` (which would leave the stripped path without its leading one).
pub fn valid_path_prefix(prefix: &str) -> bool {
    prefix.is_empty()
        || (prefix.starts_with('/')
            && !prefix.ends_with('/')
            && !prefix.contains('?')
            && prefix.bytes().all(|b| b > b' ' && b < 0x7f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Endpoint;

    #[test]
    fn the_prefix_is_stripped_at_a_segment_boundary_only() {
        for (path, expected) in [
            ("/llama/v1/chat/completions", "/v1/chat/completions"),
            ("/llama/v1/completions?x=1", "/v1/completions?x=1"),
            ("/llama", "/"),
            ("/llama?x=1", "/"),
            ("/v1/completions", "/v1/completions"),
            ("/llamas/v1/completions", "/llamas/v1/completions"),
            ("/other/llama/v1/completions", "/other/llama/v1/completions"),
        ] {
            assert_eq!(strip_path_prefix(path, "/llama"), expected, "{path}");
        }
        assert_eq!(strip_path_prefix("/team/a/v1/messages", "/team/a"), "/v1/messages");
        assert_eq!(strip_path_prefix("/llama/v1/completions", ""), "/llama/v1/completions");
        let endpoint = |path| Endpoint::from_path(strip_path_prefix(path, "/llama"));
        assert_eq!(endpoint("/llama/v1/chat/completions"), Endpoint::ChatCompletions);
        assert_eq!(endpoint("/llamas/v1/chat/completions"), Endpoint::Other);
    }

    #[test]
    fn a_prefix_is_a_path_without_trailing_slash_or_query() {
        for good in ["", "/llama", "/team/a", "/v1-llama"] {
            assert!(valid_path_prefix(good), "{good:?}");
        }
        for bad in ["llama", "/", "/llama/", "/llama?x", "/lla ma", "/llamé"] {
            assert!(!valid_path_prefix(bad), "{bad:?}");
        }
    }
}
