//! The `model` field of a `multipart/form-data` upload: vLLM's audio endpoints
//! (`/v1/audio/transcriptions`, `/v1/audio/translations`) take the file and their fields as a
//! form, and answer 404 for a model the pod does not serve, so in a pool of several models an
//! upload must be routed by its `model` as a JSON body is.
//!
//! The body is read as it arrives, part by part (RFC 7578: each part opens with a delimiter
//! line, `--` and the boundary, then its headers, a blank line and its content). The OpenAI
//! SDKs send the form's fields before the file, so the model is usually in the first chunk
//! and the upload streams on from there; a client that sends the file first is read up to its
//! end, within the filter's buffer bound. A part that is not the model's is skipped: only the
//! bytes that arrive after it are searched for the next delimiter, so a long file costs one
//! pass. A part's headers are read a line at a time, and only its `Content-Disposition` (its
//! name) and `Content-Transfer-Encoding` are looked into: any other header line, however long,
//! is passed over unkept, as python-multipart, which bounds none, reads past it. Anything
//! unexpected (no delimiter, a value too long, text that is not UTF-8) reads as "no model",
//! and the upload is routed by load as before.

mod charset;
mod model_watch;
mod part_headers;

use std::ops::Range;

use charset::{form_charset, FormCharset};
use part_headers::{named_parameters, PartHeaders};

pub use model_watch::{ModelWatch, Watched};

/// The longest part header line read whole. A `Content-Disposition` is a part's name and, for
/// a file, its filename (at most 255 bytes on common file systems; even percent-encoded, or as
/// RFC 2231's `filename*`, under 1 KiB in all): no client writes one longer, and a longer one
/// is refused ([`FormRead::DispositionTooLong`]), as what it names cannot be known from what
/// was read of it. Any other header line longer than this is passed over unread.
pub const MAX_HEADER_LINE: usize = 4096;

/// The longest model name read from a form (as the pods' model lists bound their names).
const MAX_MODEL_BYTES: usize = 256;

/// RFC 2046: a boundary is 1 to 70 characters.
const MAX_BOUNDARY: usize = 70;

/// The boundary of a `multipart/form-data` content type; `None` for any other type, or a
/// boundary missing or longer than RFC 2046 allows.
pub fn form_boundary(content_type: &str) -> Option<String> {
    let essence = content_type.split(';').next()?.trim();
    if !essence.eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    let boundary = named_parameters(content_type).find_map(|(name, value)| (name == "boundary").then_some(value))?;
    (!boundary.is_empty() && boundary.len() <= MAX_BOUNDARY).then_some(boundary)
}

/// What the body read so far says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormRead {
    /// The form's `model` field.
    Model(FormModel),
    /// Not yet known: read on from [`FormScan::resume_at`] when more of the body arrives.
    More,
    /// The form names no model that can be read (or is not one): route it without.
    NoModel,
    /// A part's `Content-Disposition` line is longer than [`MAX_HEADER_LINE`]: which field it
    /// is (`model` or another) is not known.
    DispositionTooLong,
}

/// The form's `model` field as read, and where it lies, so that it can be rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormModel {
    pub name: String,
    /// The value's bytes in the whole body: from the end of its part's headers to the line
    /// break before the next delimiter (a form's content is sent raw, never escaped).
    pub value: Range<usize>,
    /// Which names' UTF-8 bytes written over [`Self::value`] are read as those names (see
    /// [`FormModel::replaceable_by`]).
    pub replaceable: Replaceable,
}

/// Which names a form's `model` value can be replaced by, so that a server reads the name
/// written. Never when the part declares a `Content-Transfer-Encoding` but an identity one
/// (Starlette passes a part's content raw whatever it declares, but python-multipart's own
/// form parser decodes base64 and quoted-printable: such a value is routed by its bytes, as
/// read, and not rewritten).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaceable {
    /// The form's values are UTF-8 ([`FormScan::for_content_type`]): by any name.
    ByAnyName,
    /// The form's charset encodes ASCII as ASCII (US-ASCII, ISO 8859, Windows-125x) and the
    /// value read is ASCII, so the server read the name the rewrite rule matched: by an ASCII
    /// name, whose bytes mean the same in that charset.
    ByAsciiName,
    /// Another charset, or a value not ASCII in an ASCII-compatible one: what a server makes
    /// of the value, or of bytes written in its place, is not known.
    No,
}

impl FormModel {
    /// Whether `target` can be written over the value and be read as `target`.
    pub fn replaceable_by(&self, target: &str) -> bool {
        match self.replaceable {
            Replaceable::ByAnyName => true,
            Replaceable::ByAsciiName => target.is_ascii(),
            Replaceable::No => false,
        }
    }
}

/// Where the scan stands, in offsets of the whole body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Looking for the next delimiter from here (the first may open the body).
    Delimiter { from: usize },
    /// A part's header line, or the blank line that ends its headers, starts here; `part`:
    /// what its lines before said.
    Headers { start: usize, part: PartHeaders },
    /// A header line longer than [`MAX_HEADER_LINE`] goes on from here to its line break,
    /// passed over.
    LongLine { from: usize, part: PartHeaders },
    /// The model's value starts here; `encoded`: its part declares a transfer encoding.
    Value { start: usize, encoded: bool },
    /// A delimiter ended before here: the rest of its line (transport padding, spaces and
    /// tabs) and its line break are read from here.
    Padding { from: usize },
}

/// A scan of one upload's form, fed the body as it arrives.
#[derive(Debug, Clone)]
pub struct FormScan {
    /// `\r\n--` and the boundary: what ends a part's content.
    delimiter: Vec<u8>,
    place: Place,
    /// How the form's values are decoded (its content type's charset).
    charset: FormCharset,
}

impl FormScan {
    /// A scan of a form with this boundary, whose values are UTF-8.
    pub fn new(boundary: &str) -> Self {
        let mut delimiter = b"\r\n--".to_vec();
        delimiter.extend_from_slice(boundary.as_bytes());
        Self { delimiter, place: Place::Delimiter { from: 0 }, charset: FormCharset::Utf8 }
    }

    /// A scan of a body of this content type; `None` if it is not a form ([`form_boundary`]).
    /// A form of another charset than UTF-8 is read as UTF-8 all the same, to route it; its
    /// value is rewritten only when the bytes written mean the same in its charset
    /// ([`Replaceable`]).
    pub fn for_content_type(content_type: &str) -> Option<Self> {
        let boundary = form_boundary(content_type)?;
        Some(Self { charset: form_charset(content_type), ..Self::new(&boundary) })
    }

    /// The body's offset the next read must start at: what comes before it is not needed again.
    pub fn resume_at(&self) -> usize {
        match self.place {
            Place::Delimiter { from } | Place::Padding { from } | Place::LongLine { from, .. } => from,
            Place::Headers { start, .. } | Place::Value { start, .. } => start,
        }
    }

    /// A scan of the rest of the form, from the end of `model`'s value (read by this scan).
    fn after(&self, model: &FormModel) -> Self {
        Self { place: Place::Delimiter { from: model.value.end }, ..self.clone() }
    }

    /// The scan answered [`FormRead::NoModel`] in a `model` part's value: one that cannot be
    /// read (too long, not UTF-8, empty, or cut by the body's end), not a form without one.
    fn stopped_in_model_value(&self) -> bool {
        matches!(self.place, Place::Value { .. })
    }

    /// Reads `bytes`, the body from [`Self::resume_at`] to what has arrived; `complete`: the
    /// body ends there.
    pub fn scan(&mut self, bytes: &[u8], complete: bool) -> FormRead {
        let base = self.resume_at();
        // Each turn moves the place forward or answers.
        loop {
            // Places only move forward from `base`, so each is within or past `bytes`.
            let from = |at: usize| bytes.get(at.saturating_sub(base)..).unwrap_or_default();
            let read = match self.place {
                Place::Delimiter { from: at } => self.find_delimiter(from(at), at),
                Place::Headers { start, part } => self.read_header_line(from(start), start, part),
                Place::LongLine { from: at, part } => self.pass_long_line(from(at), at, part),
                Place::Value { start, encoded } => self.read_value(from(start), start, encoded),
                Place::Padding { from: at } => self.read_padding(from(at), at),
            };
            match read {
                Step::Moved => continue,
                Step::Answer(answer) => return answer,
                Step::Wait if complete => return FormRead::NoModel,
                Step::Wait => return FormRead::More,
            }
        }
    }

    /// `bytes` start at `from`: the next delimiter line opens a part's headers.
    fn find_delimiter(&mut self, bytes: &[u8], from: usize) -> Step {
        // The first delimiter may open the body, without the line break before it.
        let opening = self.delimiter.get(2..).unwrap_or_default();
        let found = if from == 0 && bytes.starts_with(opening) {
            Some((0, opening.len()))
        } else {
            find(bytes, &self.delimiter).map(|at| (at, self.delimiter.len()))
        };
        let Some((at, length)) = found else {
            // Keep only what could start a delimiter cut by the chunk's end (mostly nothing:
            // the watch then has no bytes to join the next chunk to, and copies none).
            self.place = Place::Delimiter { from: from + bytes.len() - self.cut_delimiter(bytes, from) };
            return Step::Wait;
        };
        let after = at + length;
        match bytes.get(after..after + 2) {
            // The close delimiter: the form ends without a model.
            Some(b"--") => Step::Answer(FormRead::NoModel),
            Some(_) => {
                self.place = Place::Padding { from: from + after };
                Step::Moved
            }
            None => self.wait_at(from + at),
        }
    }

    /// How many of the last of `bytes` (which start at `from` and hold no whole delimiter) a
    /// delimiter may start with, the rest of it in the next bytes: the longest such end.
    fn cut_delimiter(&self, bytes: &[u8], from: usize) -> usize {
        // The body's first bytes may be the start of an opening delimiter, without its line break.
        let opening = self.delimiter.get(2..).unwrap_or_default();
        if from == 0 && opening.starts_with(bytes) {
            return bytes.len();
        }
        (1..self.delimiter.len().min(bytes.len() + 1))
            .rev()
            .find(|&length| bytes.get(bytes.len() - length..).is_some_and(|end| self.delimiter.starts_with(end)))
            .unwrap_or(0)
    }

    /// `bytes` start at `from`, after a delimiter: spaces and tabs, then its line break, open
    /// a part. Anything else there makes it no delimiter but content (`\r\n--boundaryX`, a
    /// line feed alone), as python-multipart, which vLLM's forms are read with, reads it: the
    /// search goes on from that byte. Each byte is looked at once, however long the padding.
    fn read_padding(&mut self, bytes: &[u8], from: usize) -> Step {
        let padding = bytes.iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
        let at = from + padding;
        let rest = bytes.get(padding..).unwrap_or_default();
        if rest.starts_with(b"\r\n") {
            self.place = Place::Headers { start: at + 2, part: PartHeaders::default() };
            return Step::Moved;
        }
        if rest.is_empty() || rest == b"\r" {
            // The line goes on in the next chunk.
            self.place = Place::Padding { from: at };
            return Step::Wait;
        }
        self.place = Place::Delimiter { from: at };
        Step::Moved
    }

    /// Waits with the place at a delimiter whose line has not all arrived.
    fn wait_at(&mut self, delimiter: usize) -> Step {
        self.place = Place::Delimiter { from: delimiter };
        Step::Wait
    }

    /// `bytes` start at a part's header line, at `start` in the body, or at the blank line
    /// that ends its headers (at once for a part without headers).
    fn read_header_line(&mut self, bytes: &[u8], start: usize, mut part: PartHeaders) -> Step {
        if bytes.starts_with(b"\r\n") {
            let content = start + 2;
            self.place = match part {
                PartHeaders { names_model: true, encoded } => Place::Value { start: content, encoded },
                // Another field or the file: skipped, its content searched once for its end.
                PartHeaders { names_model: false, .. } => Place::Delimiter { from: content },
            };
            return Step::Moved;
        }
        // A line that may be read whole has its line break within these (each byte looked at
        // once more at most: a long line is searched on from its opening's end).
        let opening = bytes.get(..MAX_HEADER_LINE + 2).unwrap_or(bytes);
        match find(opening, b"\r\n") {
            Some(end) if end <= MAX_HEADER_LINE => {
                part.read_line(bytes.get(..end).unwrap_or_default());
                self.place = Place::Headers { start: start + end + 2, part };
                Step::Moved
            }
            None if opening.len() < MAX_HEADER_LINE + 2 => Step::Wait,
            _ => {
                if part.read_long_line(bytes.get(..MAX_HEADER_LINE).unwrap_or_default()).is_err() {
                    return Step::Answer(FormRead::DispositionTooLong);
                }
                // Its line break is past the opening's last line-length byte.
                self.place = Place::LongLine { from: start + MAX_HEADER_LINE, part };
                Step::Moved
            }
        }
    }

    /// `bytes` start at `from`, within a header line too long to read: passed over, each
    /// byte once and none kept but a `\r` that may open its line break.
    fn pass_long_line(&mut self, bytes: &[u8], from: usize, part: PartHeaders) -> Step {
        if let Some(end) = find(bytes, b"\r\n") {
            self.place = Place::Headers { start: from + end + 2, part };
            return Step::Moved;
        }
        let kept = usize::from(bytes.ends_with(b"\r"));
        self.place = Place::LongLine { from: from + bytes.len() - kept, part };
        Step::Wait
    }

    /// `bytes` start at the model's value, at `start` in the body.
    fn read_value(&mut self, bytes: &[u8], start: usize, encoded: bool) -> Step {
        let Some(end) = find(bytes, &self.delimiter) else {
            if bytes.len() > MAX_MODEL_BYTES + self.delimiter.len() {
                return Step::Answer(FormRead::NoModel);
            }
            return Step::Wait;
        };
        let value = bytes.get(..end).unwrap_or_default();
        match std::str::from_utf8(value) {
            Ok(name) if !name.is_empty() && name.len() <= MAX_MODEL_BYTES => Step::Answer(FormRead::Model(FormModel {
                name: name.to_owned(),
                value: start..start + end,
                replaceable: match self.charset {
                    _ if encoded => Replaceable::No,
                    FormCharset::Utf8 => Replaceable::ByAnyName,
                    FormCharset::AsciiCompatible if name.is_ascii() => Replaceable::ByAsciiName,
                    FormCharset::AsciiCompatible | FormCharset::Other => Replaceable::No,
                },
            })),
            _ => Step::Answer(FormRead::NoModel),
        }
    }
}

/// One turn of the scan.
enum Step {
    /// The place moved on: read again from there.
    Moved,
    Answer(FormRead),
    /// More of the body is needed.
    Wait,
}

/// Where `needle` first occurs in `haystack`: in linear time, so a hostile upload full of
/// near-delimiters costs a pass, not a pass per delimiter byte.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod value_tests;
