//! A minimal blocking HTTP/1.1 client over one kept-alive connection.
//!
//! Requests are encoded once, before timing starts; a timed exchange is one `write_all` and
//! the reads of the answer. Nothing else runs between the two clock reads, so the client adds
//! the same few microseconds to every variant it measures.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The header an ORIGINAL_DST cluster follows: plain Envoy gets it from the client.
pub const DESTINATION_HEADER: &str = "x-gateway-destination-endpoint";

/// Longest wait for one answer; a benchmark request that takes this long is an error.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest answer header block accepted.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// A POST, encoded.
pub fn encode_post(path: &str, extra_headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in extra_headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// One kept-alive connection to 127.0.0.1:`port`.
pub struct Connection {
    port: u16,
    stream: Option<TcpStream>,
    buffer: Vec<u8>,
}

impl Connection {
    pub fn new(port: u16) -> Self {
        Self { port, stream: None, buffer: Vec::with_capacity(16 * 1024) }
    }

    fn stream(&mut self) -> std::io::Result<&mut TcpStream> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(("127.0.0.1", self.port))?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
            self.stream = Some(stream);
            self.buffer.clear();
        }
        self.stream.as_mut().ok_or_else(|| std::io::Error::other("no stream"))
    }

    /// Sends `request` and reads the whole answer; returns its status and how long it took.
    /// On any error the connection is dropped, and the next exchange reconnects.
    pub fn exchange(&mut self, request: &[u8]) -> Result<(u16, Duration), String> {
        let outcome = self.try_exchange(request);
        if outcome.is_err() {
            self.stream = None;
        }
        outcome
    }

    fn try_exchange(&mut self, request: &[u8]) -> Result<(u16, Duration), String> {
        self.stream().map_err(|e| format!("connect: {e}"))?;
        let start = Instant::now();
        let stream = self.stream.as_mut().ok_or("no stream")?;
        stream.write_all(request).map_err(|e| format!("write: {e}"))?;
        let (status, close) = read_answer(stream, &mut self.buffer)?;
        let elapsed = start.elapsed();
        if close {
            self.stream = None;
        }
        Ok((status, elapsed))
    }
}

/// Reads one answer, its body sized by `content-length` or chunked (a streamed answer);
/// returns (status, connection closes).
fn read_answer(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<(u16, bool), String> {
    let mut chunk = [0u8; 16 * 1024];
    let header_end = loop {
        if let Some(end) = find_header_end(buffer) {
            break end;
        }
        if buffer.len() > MAX_HEADER_BYTES {
            return Err("answer headers too long".into());
        }
        let read = stream.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if read == 0 {
            return Err("connection closed before an answer".into());
        }
        buffer.extend_from_slice(chunk.get(..read).unwrap_or_default());
    };
    let head =
        std::str::from_utf8(buffer.get(..header_end).unwrap_or_default()).map_err(|_| "answer head not UTF-8")?;
    let status: u16 = head.get(9..12).and_then(|s| s.parse().ok()).ok_or("no status in answer")?;
    let mut length = None;
    let mut chunked = false;
    let mut close = false;
    for line in head.lines().skip(1) {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        } else if name.eq_ignore_ascii_case("transfer-encoding") && value.eq_ignore_ascii_case("chunked") {
            chunked = true;
        } else if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close") {
            close = true;
        }
    }
    let total = loop {
        let end = match (length, chunked) {
            (Some(length), _) => Some(header_end + length).filter(|&end| buffer.len() >= end),
            (None, true) => chunked_body_end(buffer, header_end)?,
            (None, false) => return Err("answer without content-length or chunks".into()),
        };
        if let Some(end) = end {
            break end;
        }
        let read = stream.read(&mut chunk).map_err(|e| format!("read body: {e}"))?;
        if read == 0 {
            return Err("connection closed inside a body".into());
        }
        buffer.extend_from_slice(chunk.get(..read).unwrap_or_default());
    };
    buffer.drain(..total);
    Ok((status, close))
}

/// Where a chunked body starting at `from` ends (just past its last chunk), if all of it is
/// in `buffer`. Trailers are not expected (no pod sends them).
fn chunked_body_end(buffer: &[u8], mut from: usize) -> Result<Option<usize>, String> {
    loop {
        let rest = buffer.get(from..).unwrap_or_default();
        let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
        let size_text = std::str::from_utf8(rest.get(..line_end).unwrap_or_default()).map_err(|_| "bad chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| format!("bad chunk size {size_text:?}"))?;
        // The size line, the data and the CRLF after it (the last chunk: an empty line).
        let next = from + line_end + 2 + size + 2;
        if buffer.len() < next {
            return Ok(None);
        }
        if size == 0 {
            return Ok(Some(next));
        }
        from = next;
    }
}

/// The index just past `\r\n\r\n`, if the header block is complete.
fn find_header_end(buffer: &[u8]) -> Option<usize> {
    buffer.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_a_post_with_its_length() {
        let bytes = encode_post("/v1/completions", &[(DESTINATION_HEADER, "127.0.0.1:1")], b"{}");
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with("POST /v1/completions HTTP/1.1\r\n"));
        assert!(
            text.contains("content-length: 2\r\n") && text.contains("x-gateway-destination-endpoint: 127.0.0.1:1\r\n")
        );
        assert!(text.ends_with("\r\n\r\n{}"));
        assert_eq!(find_header_end(b"HTTP/1.1 200 OK\r\n\r\nbody"), Some(19));
    }

    #[test]
    fn a_chunked_body_ends_after_its_empty_chunk() {
        let body = b"5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\n\r\nNEXT";
        assert_eq!(chunked_body_end(body, 0), Ok(Some(body.len() - 4)));
        assert_eq!(chunked_body_end(&body[..12], 0), Ok(None), "a chunk not all read yet");
        assert_eq!(chunked_body_end(b"5\r\nhello\r\n0\r\n", 0), Ok(None), "the last CRLF missing");
        assert!(chunked_body_end(b"zz\r\n", 0).is_err());
    }
}
