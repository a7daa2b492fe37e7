//! A form part's headers and a content type's parameters, read as python-multipart (vLLM's
//! form parser, through Starlette) reads them.

/// What a part's header lines, read one at a time, say of it so far: as python-multipart
/// (Starlette's parser, so vLLM's) reads them, its name is its last `Content-Disposition`
/// header's last `name` parameter, whatever the disposition's type; a `;` within quotes
/// separates nothing (`filename="a; name=model"` names no model), and a quoted value is
/// unescaped. Headers are not UTF-8 by rule (python-multipart reads them as Latin-1): bytes
/// that are not do not hide a `name` beside them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct PartHeaders {
    /// Its last `Content-Disposition` names it `model`.
    pub(super) names_model: bool,
    /// It declares a `Content-Transfer-Encoding` other than an identity one (`7bit`, `8bit`,
    /// `binary`): its content's bytes may then be read as other bytes (base64,
    /// quoted-printable). Values are compared trimmed, whatever their case.
    pub(super) encoded: bool,
}

/// A header line too long to be read whose name is `Content-Disposition`: it may name the
/// part anything past what is read of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DispositionTooLong;

impl PartHeaders {
    /// Reads one header line, without its line break.
    pub(super) fn read_line(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let Some((name, value)) = text.split_once(':') else { return };
        if is_header(name, "content-disposition") {
            self.names_model = named_parameters(value)
                .filter_map(|(name, value)| (name == "name").then_some(value))
                .last()
                .is_some_and(|name| name == "model");
        } else if is_header(name, "content-transfer-encoding") {
            let value = value.trim_matches([' ', '\t']);
            self.encoded |= !["7bit", "8bit", "binary"].iter().any(|identity| value.eq_ignore_ascii_case(identity));
        }
    }

    /// Reads a header line too long to be read whole from its `opening` bytes: passed over
    /// unless it is a `Content-Disposition`. A transfer encoding that long is taken for one
    /// that is not the identity (its value is not read: the part's content is then never
    /// rewritten, the safe side).
    pub(super) fn read_long_line(&mut self, opening: &[u8]) -> Result<(), DispositionTooLong> {
        // (A name with no `:` in the opening is longer than any of these.)
        let Some(colon) = memchr::memchr(b':', opening) else { return Ok(()) };
        let name = String::from_utf8_lossy(opening.get(..colon).unwrap_or_default());
        if is_header(&name, "content-disposition") {
            return Err(DispositionTooLong);
        }
        self.encoded |= is_header(&name, "content-transfer-encoding");
        Ok(())
    }
}

/// Whether a header line's `name` (before its `:`) is `header`, spaces aside, whatever its case.
fn is_header(name: &str, header: &str) -> bool {
    name.trim().eq_ignore_ascii_case(header)
}

/// A header value's parameters after its first part (`form-data; name="model"`,
/// `multipart/form-data; boundary=x`): each name lowercased, each value trimmed of HTTP's
/// white space and unquoted.
pub(super) fn named_parameters(value: &str) -> impl Iterator<Item = (String, String)> + '_ {
    const WHITE_SPACE: [char; 2] = [' ', '\t'];
    parameters(value).skip(1).filter_map(|parameter| {
        let (name, value) = parameter.split_once('=')?;
        Some((name.trim_matches(WHITE_SPACE).to_ascii_lowercase(), unquote(value.trim_matches(WHITE_SPACE))))
    })
}

/// A header's `;`-separated parts, a `;` between unescaped quotes not one of them.
fn parameters(value: &str) -> impl Iterator<Item = &str> {
    let (mut quoted, mut escaped) = (false, false);
    value.split(move |c: char| {
        let separates = c == ';' && !quoted;
        if c == '"' && !escaped {
            quoted = !quoted;
        }
        escaped = c == '\\';
        separates
    })
}

/// A parameter's value without its quotes, `\\` and `\"` within them unescaped.
fn unquote(value: &str) -> String {
    match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\\\\", "\\").replace("\\\"", "\""),
        None => value.to_owned(),
    }
}
