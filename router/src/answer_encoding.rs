//! Answers a pod sent compressed (`content-encoding`), read as they pass.
//!
//! vLLM does not compress, but a pod behind a compressing proxy, or another server, may when
//! the client sent `accept-encoding`. The answer's watchers (learning's `usage` and first
//! token, the opening's error event, a Responses answer's id) read plain text: on compressed
//! bytes they find nothing, so the pod's answers teach nothing and a stream that opens with an
//! error passes for output. `gzip` and `deflate` are inflated here, chunk by chunk as the
//! answer passes (it passes on unchanged: the plain bytes are a copy for the watchers alone);
//! anything else is not read ([`ContentEncoding::Unreadable`]), and the caller counts it.
//!
//! Bounds: one [`InflateState`] per answer being read (~43 KB: DEFLATE's 32 KiB window and the
//! decoder's tables), dropped once no watcher reads on; at most [`MAX_INFLATED_BYTES`] of
//! plain text per answer; a gzip header of at most [`MAX_HEADER_BYTES`]. Bytes that do not
//! inflate end the reading (an error value, never a panic), not the answer.

use std::borrow::Cow;

use miniz_oxide::inflate::stream::{inflate, InflateState};
use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};

/// Plain bytes inflated per answer at most. The watchers read a whole answer (its `usage`
/// comes last) and a stream in a reading slot to its end: a chat stream's event is ~220
/// bytes per token, so this reads ~19k tokens; past it the answer is not read on (counted
/// unread). Bounds the work a compressed answer costs (DEFLATE inflates up to ~1,000-fold:
/// 4 KiB sent can make 4 MiB to inflate).
pub const MAX_INFLATED_BYTES: usize = 4 << 20;

/// Bytes of a gzip header kept while it is incomplete: 10 fixed, then optional extra field,
/// file name and comment, which no HTTP compressor sends long.
pub const MAX_HEADER_BYTES: usize = 1024;

/// Plain bytes inflated per call into the decoder (a stack buffer).
const STEP_BYTES: usize = 4096;

/// Bytes that may follow the compressed data: gzip's CRC-32 and length (zlib's checksum is
/// read by the decoder). More (a second gzip member) is not read.
const MAX_TRAILER_BYTES: usize = 8;

/// What an answer's `content-encoding` means to its watchers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentEncoding {
    /// None, or `identity`: read as it is.
    Identity,
    Gzip,
    /// `deflate`: zlib-wrapped as RFC 9110 says, or raw DEFLATE, as some servers send.
    Deflate,
    /// `br`, `zstd`, an unknown coding or several: not read.
    Unreadable,
}

impl ContentEncoding {
    /// The header's value (`None`: the answer has none). Case and spaces aside.
    pub fn from_header(value: Option<&[u8]>) -> Self {
        let Some(value) = value.map(<[u8]>::trim_ascii).filter(|value| !value.is_empty()) else {
            return Self::Identity;
        };
        let is = |name: &[u8]| value.eq_ignore_ascii_case(name);
        if is(b"identity") {
            Self::Identity
        } else if is(b"gzip") || is(b"x-gzip") {
            Self::Gzip
        } else if is(b"deflate") {
            Self::Deflate
        } else {
            Self::Unreadable
        }
    }
}

/// Why an answer's bytes are not read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// Not gzip or DEFLATE (a bad header, a corrupt block).
    Corrupt,
    /// Past [`MAX_INFLATED_BYTES`].
    TooLarge,
    /// Bytes after the compressed data's end and its trailer.
    TrailingData,
}

#[derive(Debug)]
enum Stage {
    /// Reading the header (gzip's, or deflate's first two bytes: zlib or raw).
    Header,
    /// Inflating.
    Body,
    /// The compressed data ended; `trailing` bytes came after it.
    Ended { trailing: usize },
}

/// One compressed answer's decoder.
pub struct Inflater {
    encoding: ContentEncoding,
    stage: Stage,
    /// The header's bytes so far, while they span chunks (rare: it is the first chunk's head).
    header: Vec<u8>,
    state: Box<InflateState>,
    inflated: usize,
}

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflater").field("encoding", &self.encoding).field("inflated", &self.inflated).finish()
    }
}

impl Inflater {
    /// A decoder for `encoding`; `None` for one that is read as it is or not at all.
    pub fn new(encoding: ContentEncoding) -> Option<Self> {
        matches!(encoding, ContentEncoding::Gzip | ContentEncoding::Deflate).then(|| Self {
            encoding,
            stage: Stage::Header,
            header: Vec::new(),
            state: InflateState::new_boxed(DataFormat::Raw),
            inflated: 0,
        })
    }

    /// Inflates the answer's next `chunk`, appending its plain bytes to `plain` (none while a
    /// header or a block is incomplete). After an error the decoder is done with: the caller
    /// stops reading the answer.
    pub fn inflate(&mut self, chunk: &[u8], plain: &mut Vec<u8>) -> Result<(), Unreadable> {
        let after_header;
        let mut input = chunk;
        if matches!(self.stage, Stage::Header) {
            match self.read_header(chunk)? {
                Some(rest) => {
                    after_header = rest;
                    input = &after_header;
                }
                None => return Ok(()),
            }
        }
        if let Stage::Ended { trailing } = &mut self.stage {
            *trailing = trailing.saturating_add(input.len());
            return if *trailing > MAX_TRAILER_BYTES { Err(Unreadable::TrailingData) } else { Ok(()) };
        }
        self.inflate_body(input, plain)
    }

    /// Takes the header from the head of `chunk` (after the bytes kept from earlier chunks):
    /// the bytes after it, or `None` when it goes on in the next chunk.
    fn read_header<'a>(&mut self, chunk: &'a [u8]) -> Result<Option<Cow<'a, [u8]>>, Unreadable> {
        let mut joined = std::mem::take(&mut self.header);
        if !joined.is_empty() {
            joined.extend_from_slice(chunk);
        }
        let bytes = if joined.is_empty() { chunk } else { &joined[..] };
        let length = match self.encoding {
            ContentEncoding::Gzip => gzip_header_length(bytes)?,
            _ => self.deflate_header_length(bytes),
        };
        let Some(length) = length else {
            if bytes.len() >= MAX_HEADER_BYTES {
                return Err(Unreadable::Corrupt);
            }
            self.header = bytes.to_vec();
            return Ok(None);
        };
        if length > MAX_HEADER_BYTES {
            // (However its chunks split: a header is read past only within the bound.)
            return Err(Unreadable::Corrupt);
        }
        self.stage = Stage::Body;
        if joined.is_empty() {
            return Ok(Some(Cow::Borrowed(chunk.get(length..).unwrap_or_default())));
        }
        // (Rare: a header cut between chunks. The copy is of one chunk.)
        Ok(Some(Cow::Owned(joined.get(length..).unwrap_or_default().to_vec())))
    }

    /// deflate's "header": none, but zlib's two bytes when they are there (RFC 1950: method 8,
    /// a window of at most 32 KiB, no preset dictionary, and the check bits); the decoder is
    /// told which. `None`: fewer than two bytes yet.
    fn deflate_header_length(&mut self, bytes: &[u8]) -> Option<usize> {
        let (&method, &flags) = (bytes.first()?, bytes.get(1)?);
        let zlib = method & 0x0f == 8
            && method >> 4 <= 7
            && flags & 0x20 == 0
            && (u16::from(method) << 8 | u16::from(flags)) % 31 == 0;
        if zlib {
            // Its checksum is not checked: the text is only read, and the answer passes as sent.
            self.state.reset(DataFormat::ZLibIgnoreChecksum);
        }
        Some(0)
    }

    fn inflate_body(&mut self, mut input: &[u8], plain: &mut Vec<u8>) -> Result<(), Unreadable> {
        let mut step = [0_u8; STEP_BYTES];
        loop {
            let result = inflate(&mut self.state, input, &mut step, MZFlush::None);
            input = input.get(result.bytes_consumed..).unwrap_or_default();
            let written = step.get(..result.bytes_written).unwrap_or_default();
            self.inflated = self.inflated.saturating_add(written.len());
            if self.inflated > MAX_INFLATED_BYTES {
                return Err(Unreadable::TooLarge);
            }
            plain.extend_from_slice(written);
            match result.status {
                Ok(MZStatus::StreamEnd) => {
                    self.stage = Stage::Ended { trailing: 0 };
                    return self.inflate(input, plain);
                }
                Ok(_) => {}
                // No input left to make progress with: the next chunk goes on.
                Err(MZError::Buf) if input.is_empty() => return Ok(()),
                Err(_) => return Err(Unreadable::Corrupt),
            }
            // Called again until a call gives nothing: with all input taken the decoder may
            // still hold output (it stops where its 32 KiB window wraps), which must not wait
            // for a next chunk that may never come (an answer's last bytes carry its `usage`).
            // A call that neither takes nor gives a byte with input left would loop forever:
            // such bytes are not read.
            if result.bytes_written == 0 && (input.is_empty() || result.bytes_consumed == 0) {
                return if input.is_empty() { Ok(()) } else { Err(Unreadable::Corrupt) };
            }
        }
    }
}

/// A gzip member header's length (RFC 1952), once `bytes` hold it whole; `None` until then.
fn gzip_header_length(bytes: &[u8]) -> Result<Option<usize>, Unreadable> {
    const FIXED: usize = 10;
    const FHCRC: u8 = 0x02;
    const FEXTRA: u8 = 0x04;
    const FNAME: u8 = 0x08;
    const FCOMMENT: u8 = 0x10;
    const RESERVED: u8 = 0xe0;
    let byte = |at: usize| bytes.get(at).copied();
    for (at, expected) in [(0, 0x1f), (1, 0x8b), (2, 8)] {
        match byte(at) {
            None => return Ok(None),
            Some(found) if found != expected => return Err(Unreadable::Corrupt),
            Some(_) => {}
        }
    }
    let Some(flags) = byte(3) else { return Ok(None) };
    if flags & RESERVED != 0 {
        return Err(Unreadable::Corrupt);
    }
    let mut length = FIXED;
    if flags & FEXTRA != 0 {
        let (Some(low), Some(high)) = (byte(FIXED), byte(FIXED + 1)) else { return Ok(None) };
        length += 2 + usize::from(u16::from_le_bytes([low, high]));
    }
    for field in [FNAME, FCOMMENT] {
        if flags & field != 0 {
            // Zero-terminated.
            let Some(end) = bytes.get(length..).and_then(|rest| rest.iter().position(|&b| b == 0)) else {
                return Ok(None);
            };
            length += end + 1;
        }
    }
    if flags & FHCRC != 0 {
        length += 2;
    }
    Ok((bytes.len() >= length).then_some(length))
}

#[cfg(test)]
mod tests {
    use super::*;
    use miniz_oxide::deflate::{compress_to_vec, compress_to_vec_zlib};

    const ANSWER: &[u8] = br#"{"id":"cmpl-1","choices":[{"text":" a b c"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}}"#;

    fn gzip(plain: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
        bytes.extend(compress_to_vec(plain, 6));
        bytes.extend([0; 8]);
        bytes
    }

    fn inflate_in(encoding: ContentEncoding, compressed: &[u8], chunk: usize) -> Result<Vec<u8>, Unreadable> {
        let mut inflater = Inflater::new(encoding).unwrap();
        let mut plain = Vec::new();
        for part in compressed.chunks(chunk) {
            inflater.inflate(part, &mut plain)?;
        }
        Ok(plain)
    }

    #[test]
    fn the_header_names_the_coding() {
        assert_eq!(ContentEncoding::from_header(None), ContentEncoding::Identity);
        assert_eq!(ContentEncoding::from_header(Some(b" Identity")), ContentEncoding::Identity);
        assert_eq!(ContentEncoding::from_header(Some(b"GZIP")), ContentEncoding::Gzip);
        assert_eq!(ContentEncoding::from_header(Some(b"x-gzip")), ContentEncoding::Gzip);
        assert_eq!(ContentEncoding::from_header(Some(b"deflate ")), ContentEncoding::Deflate);
        for other in [&b"br"[..], b"zstd", b"gzip, br", b"compress"] {
            assert_eq!(ContentEncoding::from_header(Some(other)), ContentEncoding::Unreadable);
        }
        assert!(Inflater::new(ContentEncoding::Unreadable).is_none());
    }

    #[test]
    fn gzip_zlib_and_raw_deflate_inflate_in_any_chunking() {
        for chunk in [1, 2, 3, 7, 11, 64, 4096] {
            assert_eq!(inflate_in(ContentEncoding::Gzip, &gzip(ANSWER), chunk).unwrap(), ANSWER, "gzip, {chunk}");
            let zlib = compress_to_vec_zlib(ANSWER, 6);
            assert_eq!(inflate_in(ContentEncoding::Deflate, &zlib, chunk).unwrap(), ANSWER, "zlib, {chunk}");
            let raw = compress_to_vec(ANSWER, 1);
            assert_eq!(inflate_in(ContentEncoding::Deflate, &raw, chunk).unwrap(), ANSWER, "raw, {chunk}");
        }
    }

    #[test]
    fn output_held_where_the_window_wraps_is_given_with_the_chunk_that_made_it() {
        // (Found by fuzz/answer_inflate: a chunk whose input ends as the decoder's 32 KiB
        // window wraps; its last bytes, an answer's `usage`, must not wait for a next chunk.)
        // The fuzz input (its first bytes say deflate, one cut at 96/256): raw DEFLATE of
        // 32,769 bytes whose last byte the decoder held at the wrap when cut there.
        let input = include_bytes!("../../fuzz/corpus/answer_inflate/window_wrap");
        let compressed = &input[2..];
        let at = 96 * compressed.len() / 256;
        let inflated = |chunks: &[&[u8]]| {
            let mut inflater = Inflater::new(ContentEncoding::Deflate).unwrap();
            let mut out = Vec::new();
            chunks.iter().for_each(|chunk| inflater.inflate(chunk, &mut out).unwrap());
            out
        };
        let whole = inflated(&[compressed]);
        assert_eq!(whole.len(), 32_769);
        assert!(inflated(&[&compressed[..at], &compressed[at..]]) == whole, "cut at {at}");
    }

    #[test]
    fn a_gzip_header_with_its_optional_fields_is_read_past() {
        let mut bytes = vec![0x1f, 0x8b, 8, 0x02 | 0x04 | 0x08 | 0x10, 0, 0, 0, 0, 0, 3];
        bytes.extend([3, 0, b'x', b'y', b'z']);
        bytes.extend(b"answer.json\0a comment\0");
        bytes.extend([0xab, 0xcd]);
        bytes.extend(compress_to_vec(ANSWER, 6));
        for chunk in [1, 5, 40] {
            assert_eq!(inflate_in(ContentEncoding::Gzip, &bytes, chunk).unwrap(), ANSWER);
        }
    }

    #[test]
    fn corrupt_bytes_end_the_reading_without_a_panic() {
        assert_eq!(inflate_in(ContentEncoding::Gzip, ANSWER, 64), Err(Unreadable::Corrupt), "plain text, not gzip");
        let mut broken = gzip(ANSWER);
        for byte in broken.iter_mut().skip(12).take(20) {
            *byte = 0xff;
        }
        assert!(inflate_in(ContentEncoding::Gzip, &broken, 16).is_err());
        let reserved = [0x1f, 0x8b, 8, 0x80, 0, 0, 0, 0, 0, 0];
        assert_eq!(inflate_in(ContentEncoding::Gzip, &reserved, 4), Err(Unreadable::Corrupt));
        let endless_name = [&[0x1f, 0x8b, 8, 0x08, 0, 0, 0, 0, 0, 0][..], &[b'a'; 2000]].concat();
        assert_eq!(inflate_in(ContentEncoding::Gzip, &endless_name, 100), Err(Unreadable::Corrupt));
        let long_name = [&endless_name[..], b"\0", &compress_to_vec(ANSWER, 6)].concat();
        for chunk in [1, 100, 4096] {
            assert_eq!(inflate_in(ContentEncoding::Gzip, &long_name, chunk), Err(Unreadable::Corrupt), "{chunk}");
        }
        let second_member = [gzip(ANSWER), gzip(ANSWER)].concat();
        assert_eq!(inflate_in(ContentEncoding::Gzip, &second_member, 64), Err(Unreadable::TrailingData));
    }

    #[test]
    fn a_bomb_is_read_no_further_than_the_bound() {
        let zeros = vec![0_u8; MAX_INFLATED_BYTES + 1];
        let bomb = gzip(&zeros);
        assert!(bomb.len() < 8 * 1024, "{} bytes", bomb.len());
        let mut inflater = Inflater::new(ContentEncoding::Gzip).unwrap();
        let mut plain = Vec::new();
        assert_eq!(inflater.inflate(&bomb, &mut plain), Err(Unreadable::TooLarge));
        assert!(plain.len() <= MAX_INFLATED_BYTES);
    }
}
