//! A form part's headers and a content type's parameters, read as python-multipart (vLLM's
//! form parser, through Starlette) reads them.

/// The `name` a part's headers give it (`Content-Disposition: form-data; name="model"`), read
/// as python-multipart reads it (Starlette's parser, so vLLM's): the last `Content-Disposition`
/// header's last `name` parameter, whatever the disposition's type; a `;` within quotes
/// separates nothing (`filename="a; name=model"` names no model), and a quoted value is
/// unescaped. Headers are not UTF-8 by rule (python-multipart reads them as Latin-1): bytes
/// that are not do not hide a `name` beside them.
pub(super) fn part_name(headers: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(headers);
    let disposition = text
        .split("\r\n")
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim().eq_ignore_ascii_case("content-disposition").then_some(value)
        })
        .last()?;
    named_parameters(disposition).filter_map(|(name, value)| (name == "name").then_some(value)).last()
}

/// Whether the part declares a `Content-Transfer-Encoding` other than an identity one (`7bit`,
/// `8bit`, `binary`): its content's bytes may then be read as other bytes (base64,
/// quoted-printable). Header values are compared trimmed, whatever their case.
pub(super) fn transfer_encoded(headers: &[u8]) -> bool {
    String::from_utf8_lossy(headers).split("\r\n").any(|line| {
        let Some((name, value)) = line.split_once(':') else { return false };
        let value = value.trim_matches([' ', '\t']);
        name.trim().eq_ignore_ascii_case("content-transfer-encoding")
            && !["7bit", "8bit", "binary"].iter().any(|identity| value.eq_ignore_ascii_case(identity))
    })
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
