//! Server-sent events from a byte stream: the `data:` payload of each event, as it arrives.
//! The one SSE framer of the repository: the simulator's client and the quality benchmark's
//! client both read streams through it.
//!
//! Frames from the network split events anywhere (even inside a UTF-8 character), so bytes
//! are buffered until a blank line ends the event. The buffer is bounded: a peer that never
//! ends an event is an error, not unbounded memory.

/// A single event larger than this is refused (a streamed token chunk is a few hundred bytes).
const MAX_EVENT_BYTES: usize = 1 << 20;

#[derive(Debug, Default)]
pub struct SseDecoder {
    pending: Vec<u8>,
}

impl SseDecoder {
    /// Adds `bytes` and returns the data payloads of every event they completed.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, String> {
        self.pending.extend_from_slice(bytes);
        let mut payloads = Vec::new();
        while let Some((event_end, separator_len)) = find_event_end(&self.pending) {
            let event: Vec<u8> = self.pending.drain(..event_end + separator_len).take(event_end).collect();
            let text = String::from_utf8_lossy(&event);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|value| value.strip_prefix(' ').unwrap_or(value))
                .collect();
            if !data.is_empty() {
                payloads.push(data.join("\n"));
            }
        }
        if self.pending.len() > MAX_EVENT_BYTES {
            return Err(format!("server-sent event longer than {MAX_EVENT_BYTES} bytes"));
        }
        Ok(payloads)
    }
}

/// Position and length of the first blank-line separator (`\n\n` or `\r\n\r\n`).
fn find_event_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|pair| pair == b"\n\n").map(|at| (at, 2));
    let crlf = buffer.windows(4).position(|quad| quad == b"\r\n\r\n").map(|at| (at, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_frames_are_joined() {
        let mut decoder = SseDecoder::default();
        assert!(decoder.push(b"data: {\"a\"").unwrap().is_empty());
        assert_eq!(decoder.push(b":1}\n\ndata: [DONE]\n").unwrap(), vec!["{\"a\":1}"]);
        assert_eq!(decoder.push(b"\n").unwrap(), vec!["[DONE]"]);
    }

    #[test]
    fn crlf_separators_comments_and_multiline_data() {
        let mut decoder = SseDecoder::default();
        let payloads = decoder.push(b": keep-alive\r\n\r\ndata: x\r\ndata: y\r\n\r\n").unwrap();
        assert_eq!(payloads, vec!["x\ny"]);
    }

    #[test]
    fn an_endless_event_is_an_error() {
        let mut decoder = SseDecoder::default();
        let long = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert!(decoder.push(&long).is_err());
    }
}
