//! An HTTP/2 (prior knowledge) client that ends its request body with trailers, which
//! curl and ureq cannot send.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Frame;

const TIMEOUT: Duration = Duration::from_secs(20);

/// One HTTP/2 (prior knowledge) POST whose body ends with trailers. Returns the status and
/// the pod that served it.
pub fn post_with_trailers(port: u16, extra: &[(&str, &str)], trailers: &[(&str, &str)]) -> (u16, Option<String>) {
    let body = r#"{"model":"sim-model","prompt":"h2 with trailers","max_tokens":2}"#;
    post_frames(port, "/v1/completions", extra, &[Bytes::from_static(body.as_bytes())], Some(trailers))
}

/// One HTTP/2 (prior knowledge) POST to `path` whose body is `chunks`, one DATA frame each
/// (hyper splits a chunk past the peer's frame size), then `trailers` if given; JSON unless
/// `extra` names a content type. Returns the status and the pod that served it.
pub fn post_frames(
    port: u16,
    path: &str,
    extra: &[(&str, &str)],
    chunks: &[Bytes],
    trailers: Option<&[(&str, &str)]>,
) -> (u16, Option<String>) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io).await.unwrap();
        tokio::spawn(connection);
        let mut frames: std::collections::VecDeque<Frame<Bytes>> = chunks.iter().cloned().map(Frame::data).collect();
        if let Some(trailers) = trailers {
            let mut trailer_map = hyper::HeaderMap::new();
            for (name, value) in trailers {
                let name = hyper::header::HeaderName::from_bytes(name.as_bytes()).unwrap();
                trailer_map.insert(name, value.parse().unwrap());
            }
            frames.push_back(Frame::trailers(trailer_map));
        }
        let mut request = hyper::Request::post(format!("http://127.0.0.1:{port}{path}"));
        if !extra.iter().any(|(name, _)| name.eq_ignore_ascii_case("content-type")) {
            request = request.header("content-type", "application/json");
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        let request = request.body(Frames(frames)).unwrap();
        let response = tokio::time::timeout(TIMEOUT, sender.send_request(request)).await.unwrap().unwrap();
        let status = response.status().as_u16();
        let served = response.headers().get("x-served-by").and_then(|v| v.to_str().ok()).map(str::to_string);
        let _ = response.into_body().collect().await;
        (status, served)
    })
}

/// A request body of ready frames: data, then trailers.
struct Frames(std::collections::VecDeque<Frame<Bytes>>);

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// An HTTP/2 client that stops reading its answer: a POST of `body` to `path` on `port`, over
/// a connection whose stream window is `window` bytes. Returns the answer's body stream once
/// its first chunk arrived, with that chunk, not given back to the window: Envoy holds what
/// does not fit until the caller reads on (`flow_control().release_capacity`). Asserts a 200.
pub async fn open_unread(port: u16, path: &str, window: u32, body: String) -> (::h2::RecvStream, Bytes) {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (sender, connection) =
        ::h2::client::Builder::new().initial_window_size(window).handshake::<_, Bytes>(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut sender = sender.ready().await.unwrap();
    // (Its length declared: the tests' fake pods read no chunked body.)
    let request = hyper::Request::post(format!("http://127.0.0.1:{port}{path}"))
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(())
        .unwrap();
    let (response, mut send) = sender.send_request(request, false).unwrap();
    send.send_data(Bytes::from(body), true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let mut received = response.into_body();
    let first = received.data().await.unwrap().unwrap();
    (received, first)
}
