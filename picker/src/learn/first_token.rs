//! Where a Responses API stream's first token is.
//!
//! A chat or completions stream's first byte is its first token. A Responses API stream opens
//! with `response.created` and `response.in_progress`, sent before the prefill (vLLM does so),
//! and its first token comes with the first output event: `response.output_item.added`, then
//! `response.output_text.delta` (or a reasoning or function-call item's events, which also
//! begin with an `output_item.added`). The finder watches the stream's chunks as they pass
//! for an event of type `response.output_…`, named on its `event:` line or in its data's
//! `"type"`. Neither form can occur inside the preamble's echoed instructions or tools: a JSON
//! string escapes its quotes and holds no raw newline. The marker may straddle two chunks, so
//! the last bytes of each chunk are kept (at most [`MAX_MARKER`] − 1).

/// The forms an output event's type takes in an SSE stream: the `event:` field (always after a
/// newline, as the stream opens with the preamble's events) or the data's `type` key, written
/// compactly (pydantic) or with Python's default separators.
const MARKERS: [&[u8]; 4] = [
    b"\nevent: response.output_",
    b"\nevent:response.output_",
    b"\"type\":\"response.output_",
    b"\"type\": \"response.output_",
];

/// The longest marker's length.
pub const MAX_MARKER: usize = 25;

/// Bytes a stream may open with before its first output event. vLLM's two opening events each
/// echo the request's `instructions` and `tools`, which an agent's turn makes tens or hundreds
/// of kilobytes; a stream past this without an output event is not shaped as vLLM's, and
/// waiting on would copy its every chunk and count its prompt in flight to its end.
pub const MAX_OPENING_BYTES: usize = 1 << 20;

/// Chunks likewise: each is one copy into the VM, so a pod dribbling tiny chunks is given up
/// on sooner than its bytes would say (256 chunks of Envoy's usual 16 KiB reads are 4 MiB).
pub const MAX_OPENING_CHUNKS: u32 = 256;

/// What a chunk told of the first output event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstOutput {
    /// It is in this chunk: the first token came with it.
    Found,
    /// Not yet: still the stream's opening events.
    NotYet,
    /// [`MAX_OPENING_BYTES`] or [`MAX_OPENING_CHUNKS`] passed without one: the finder gives up
    /// (no TTFT to learn).
    GaveUp,
}

/// Finds a Responses API stream's first output event, chunk by chunk.
#[derive(Debug, Clone)]
pub struct OutputEventFinder {
    /// The end of the previous chunk: a marker may begin there.
    tail: Vec<u8>,
    /// Chunks and bytes left before giving up.
    chunks_left: u32,
    bytes_left: usize,
}

impl Default for OutputEventFinder {
    fn default() -> Self {
        Self::with_limit(MAX_OPENING_CHUNKS)
    }
}

impl OutputEventFinder {
    /// Gives up after `chunks` chunks or [`MAX_OPENING_BYTES`] without an output event.
    pub fn with_limit(chunks: u32) -> Self {
        Self { tail: Vec::new(), chunks_left: chunks, bytes_left: MAX_OPENING_BYTES }
    }

    /// Whether this chunk, with the end of the ones before it, holds the first output event.
    pub fn feed(&mut self, chunk: &[u8]) -> FirstOutput {
        let keep = MAX_MARKER - 1;
        // Only the seam needs the tail: a marker wholly inside the chunk is found in it.
        let seam_end = chunk.len().min(keep);
        let mut seam = std::mem::take(&mut self.tail);
        seam.extend_from_slice(chunk.get(..seam_end).unwrap_or_default());
        if holds_marker(&seam) || holds_marker(chunk) {
            return FirstOutput::Found;
        }
        self.chunks_left = self.chunks_left.saturating_sub(1);
        self.bytes_left = self.bytes_left.saturating_sub(chunk.len());
        if self.chunks_left == 0 || self.bytes_left == 0 {
            return FirstOutput::GaveUp;
        }
        let joined_tail = if chunk.len() >= keep { chunk } else { &seam };
        let from = joined_tail.len().saturating_sub(keep);
        self.tail = joined_tail.get(from..).unwrap_or_default().to_vec();
        FirstOutput::NotYet
    }
}

/// What every marker ends with: found with a substring search, then the bytes before it are
/// checked for one of the markers' beginnings. (Natively 0.05 µs per KiB against 2.0 for four
/// window scans of every chunk; an agent's opening events echo tens or hundreds of KiB of
/// instructions and tools.)
const TYPE_NAME: &[u8] = b"response.output_";

fn holds_marker(bytes: &[u8]) -> bool {
    memchr::memmem::find_iter(bytes, TYPE_NAME).any(|at| {
        let before = bytes.get(..at).unwrap_or_default();
        MARKERS.iter().any(|marker| marker.strip_suffix(TYPE_NAME).is_some_and(|start| before.ends_with(start)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// vLLM's stream of a short answer; the instructions name the event types a client reads.
    const STREAM: &str = concat!(
        "event: response.created\ndata: {\"response\":{\"id\":\"resp_1\",\"instructions\":",
        "\"Parse \\\"type\\\":\\\"response.output_text.delta\\\" events.\\nevent: response.output_\",",
        "\"output\":[],\"status\":\"in_progress\"},\"sequence_number\":0,\"type\":\"response.created\"}\n\n",
        "event: response.in_progress\ndata: {\"response\":{\"id\":\"resp_1\"},\"sequence_number\":1,",
        "\"type\":\"response.in_progress\"}\n\n",
        "event: response.output_item.added\ndata: {\"item\":{\"type\":\"message\"},\"output_index\":0,",
        "\"sequence_number\":2,\"type\":\"response.output_item.added\"}\n\n",
        "event: response.output_text.delta\ndata: {\"delta\":\"Hi\",\"type\":\"response.output_text.delta\"}\n\n",
    );

    fn first_token_chunk(chunks: &[&[u8]]) -> Option<usize> {
        // These tests split finely: no giving up.
        let mut finder = OutputEventFinder::with_limit(u32::MAX);
        chunks.iter().position(|chunk| finder.feed(chunk) == FirstOutput::Found)
    }

    #[test]
    fn the_first_output_event_is_found_wherever_the_chunks_split() {
        assert!(MARKERS.iter().all(|marker| marker.len() <= MAX_MARKER));
        let bytes = STREAM.as_bytes();
        let at = STREAM.find("event: response.output_item").unwrap();
        let preamble = &bytes[..at];
        assert_eq!(first_token_chunk(&[preamble]), None, "the echoed instructions are no output event");
        for split in 0..bytes.len() {
            let (head, tail) = bytes.split_at(split);
            let found = first_token_chunk(&[head, tail]).unwrap();
            // The event line is found from its newline; by then the head holds its start.
            let expected = usize::from(split < at + "event: response.output_".len());
            assert_eq!(found, expected, "split at {split}");
        }
        for piece in [1, 2, 5, 23, 24, 25, 64] {
            let chunks: Vec<&[u8]> = bytes.chunks(piece).collect();
            let found = first_token_chunk(&chunks).unwrap();
            // The chunk that completes the event line's marker (its last byte is at + 22).
            assert!(found * piece <= at + 22 && at + 22 < (found + 1) * piece, "pieces of {piece}: chunk {found}");
        }
    }

    #[test]
    fn a_data_only_stream_is_read_by_its_type_key_and_an_error_event_is_no_token() {
        let data_only =
            b"data: {\"type\": \"response.created\"}\n\ndata: {\"type\": \"response.output_item.added\"}\n\n";
        assert_eq!(first_token_chunk(&[&data_only[..50], &data_only[50..]]), Some(1));
        let error = b"event: response.created\ndata: {}\n\nevent: error\ndata: {\"type\":\"error\",\"code\":\"x\"}\n\n";
        assert_eq!(first_token_chunk(&[error]), None);
    }

    #[test]
    fn a_stream_that_opens_with_too_many_other_events_is_given_up_on() {
        let mut finder = OutputEventFinder::default();
        let other = b"event: response.custom\ndata: {\"type\":\"response.custom\"}\n\n";
        let outcomes: Vec<FirstOutput> = (0..MAX_OPENING_CHUNKS).map(|_| finder.feed(other)).collect();
        assert!(outcomes.iter().take(outcomes.len() - 1).all(|o| *o == FirstOutput::NotYet), "{outcomes:?}");
        assert_eq!(outcomes.last(), Some(&FirstOutput::GaveUp));
    }

    #[test]
    fn an_agent_s_long_preamble_in_many_chunks_is_waited_through_but_not_forever() {
        // `response.created` echoing 128 KiB of instructions and tools, in 8 KiB reads.
        let mut finder = OutputEventFinder::default();
        let echoed = format!("event: response.created\ndata: {{\"instructions\":\"{}\"}}\n\n", "i".repeat(128 << 10));
        let outcomes: Vec<FirstOutput> = echoed.as_bytes().chunks(8 << 10).map(|c| finder.feed(c)).collect();
        assert!(outcomes.iter().all(|o| *o == FirstOutput::NotYet), "{} chunks", outcomes.len());
        assert_eq!(finder.feed(b"event: response.output_item.added\ndata: {}\n\n"), FirstOutput::Found);
        // A megabyte of opening events is past what vLLM sends: given up.
        let mut finder = OutputEventFinder::default();
        let big = vec![b'x'; 64 << 10];
        let given_up =
            (0..MAX_OPENING_BYTES / big.len()).map(|_| finder.feed(&big)).position(|o| o == FirstOutput::GaveUp);
        assert_eq!(given_up, Some(MAX_OPENING_BYTES / big.len() - 1));
    }
}
