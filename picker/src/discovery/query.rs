//! The API paths the singleton asks for, with their query strings encoded.
//!
//! Selectors and `continue` tokens are percent-encoded byte by byte (RFC 3986 unreserved
//! characters stay), so no value can add a query parameter or break out of the path.

use super::config::InferencePoolApi;

/// `/api/v1/namespaces/{namespace}/pods?...`: one LIST page of the pool's Running pods.
///
/// `fieldSelector=status.phase=Running` lets the API server drop pending and finished pods
/// before they cost bytes; readiness is still checked on every item (a Running pod can be
/// not Ready, or terminating).
pub fn pods_page(namespace: &str, selector: &str, page_size: u32, continue_token: Option<&str>) -> String {
    let mut path = format!(
        "/api/v1/namespaces/{namespace}/pods?labelSelector={}&fieldSelector={}&limit={page_size}",
        encode(selector),
        encode("status.phase=Running")
    );
    if let Some(token) = continue_token {
        path.push_str("&continue=");
        path.push_str(&encode(token));
    }
    path
}

/// `/apis/{group}/{version}/namespaces/{namespace}/inferencepools/{name}`.
pub fn inference_pool(namespace: &str, name: &str, api: InferencePoolApi) -> String {
    format!("/apis/{}/namespaces/{namespace}/inferencepools/{name}", api.group_version())
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn encode(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX.get(usize::from(byte >> 4)).copied().unwrap_or(b'0')));
            out.push(char::from(HEX.get(usize::from(byte & 0x0f)).copied().unwrap_or(b'0')));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_selectors_and_tokens() {
        assert_eq!(encode("app=vllm,tier in (gpu)"), "app%3Dvllm%2Ctier%20in%20%28gpu%29");
        assert_eq!(
            pods_page("llm", "app=vllm", 500, Some("eyJ2Ijoi+/=")),
            "/api/v1/namespaces/llm/pods?labelSelector=app%3Dvllm&fieldSelector=status.phase%3DRunning&limit=500\
             &continue=eyJ2Ijoi%2B%2F%3D"
        );
        assert_eq!(encode("&limit=1"), "%26limit%3D1", "a value cannot add a parameter");
    }

    #[test]
    fn pool_paths_follow_the_api_version() {
        assert_eq!(
            inference_pool("llm", "qwen", InferencePoolApi::V1),
            "/apis/inference.networking.k8s.io/v1/namespaces/llm/inferencepools/qwen"
        );
        assert_eq!(
            inference_pool("llm", "qwen", InferencePoolApi::V1Alpha2),
            "/apis/inference.networking.x-k8s.io/v1alpha2/namespaces/llm/inferencepools/qwen"
        );
    }
}
