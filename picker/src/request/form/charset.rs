//! What a form's `charset` means for rewriting its `model` value. vLLM reads a form through
//! Starlette, which decodes each value with the content type's charset (UTF-8 when it names
//! none), and with Latin-1 when Python does not know that charset or the bytes do not decode.

use super::part_headers::named_parameters;

/// How the form's values are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FormCharset {
    /// No charset, or UTF-8: any name's UTF-8 bytes are read as that name.
    Utf8,
    /// A charset whose first 128 code points are ASCII's, one byte each: ASCII bytes are read
    /// as the same ASCII text, other bytes are not known to mean what UTF-8 says.
    AsciiCompatible,
    /// Any other (UTF-16, EBCDIC, ...), or an ASCII-compatible one named beside another:
    /// what a server reads in a value's place is not known.
    Other,
}

/// Charsets that encode ASCII as ASCII, as their names read once lowercased without `-`,
/// `_` or spaces (Python's codec lookup ignores those too): US-ASCII, every ISO 8859 part and
/// its `latin` alias, and the Windows code pages 1250 to 1258. A list, not a rule: a name
/// left off is kept out of rewrites (as before), never rewritten in a charset that would read
/// the bytes otherwise (`utf-7`, `shift_jis` reading `~` and `\` otherwise, `cp037`).
const ASCII_COMPATIBLE: &str = "usascii ascii ansix3.41968 iso646us l1 \
    latin1 latin2 latin3 latin4 latin5 latin6 latin7 latin8 latin9 latin10 \
    iso88591 iso88592 iso88593 iso88594 iso88595 iso88596 iso88597 iso88598 iso88599 \
    iso885910 iso885911 iso885913 iso885914 iso885915 iso885916 \
    windows1250 windows1251 windows1252 windows1253 windows1254 windows1255 windows1256 windows1257 windows1258 \
    cp1250 cp1251 cp1252 cp1253 cp1254 cp1255 cp1256 cp1257 cp1258";

/// The charset a form's content type names (each `charset` parameter, should it name several).
pub(super) fn form_charset(content_type: &str) -> FormCharset {
    let mut charset = FormCharset::Utf8;
    for (_, value) in named_parameters(content_type).filter(|(name, _)| name == "charset") {
        let folded: String = value.chars().filter(|c| !matches!(c, '-' | '_' | ' ')).collect();
        let folded = folded.to_ascii_lowercase();
        if folded == "utf8" {
            continue;
        }
        charset = if ASCII_COMPATIBLE.split_ascii_whitespace().any(|known| known == folded)
            && charset != FormCharset::Other
        {
            FormCharset::AsciiCompatible
        } else {
            FormCharset::Other
        };
    }
    charset
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(parameters: &str) -> FormCharset {
        form_charset(&format!("multipart/form-data; boundary=b{parameters}"))
    }

    #[test]
    fn utf8_ascii_compatible_and_other_charsets() {
        for utf8 in ["", "; charset=UTF-8", "; charset=\"utf8\"", "; charset=utf_8"] {
            assert_eq!(of(utf8), FormCharset::Utf8, "{utf8:?}");
        }
        for ascii in ["us-ascii", "US-ASCII", "ascii", "iso-8859-1", "ISO_8859-15", "latin1", "windows-1252", "cp1251"]
        {
            assert_eq!(of(&format!("; charset={ascii}")), FormCharset::AsciiCompatible, "{ascii}");
        }
        for other in ["utf-16", "utf-7", "shift_jis", "cp037", "x-unknown", ""] {
            assert_eq!(of(&format!("; charset={other}")), FormCharset::Other, "{other:?}");
        }
        // Named twice: the least a value's bytes may be taken for.
        assert_eq!(of("; charset=latin1; charset=utf-8"), FormCharset::AsciiCompatible);
        assert_eq!(of("; charset=utf-16; charset=latin1"), FormCharset::Other);
    }
}
