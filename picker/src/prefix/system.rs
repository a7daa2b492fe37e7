//! A Messages API request's `system` prompt as vLLM renders it: without Claude Code's billing
//! header.
//!
//! Claude Code (2.1.36 on) opens `system` with a text block
//! `x-anthropic-billing-header: cc_version=…; cc_entrypoint=cli; cch=<hash>;` whose `cch`
//! changes with every request. vLLM drops every text block of `system` that starts so before
//! rendering the chat (`_convert_system_message` in `vllm/entrypoints/anthropic/serving.py`,
//! vllm-project/vllm#36829), so the pod's cache holds the conversation without it. Hashed as
//! written, that block made each turn of an agent share only its `tools` with the turn before:
//! the conversation lost its pod at every turn.

use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

use super::hash::{BlockChain, ShapeError};
use super::json::{for_each_element, span_of, string_contents};

/// What such a block's text starts with (vLLM's test, `str.startswith`).
const BILLING_HEADER: &str = "x-anthropic-billing-header";

/// Feeds `system` (raw JSON: a string or a list of blocks) as written, except that every text
/// block starting with [`BILLING_HEADER`] is cut out; false once the chain is full. A string is
/// fed whole: vLLM strips only blocks. The cut leaves the list's commas as they were (`[,{…}]`):
/// harmless, since every turn is cut the same way.
pub(super) fn feed_system(system: &str, chain: &mut BlockChain<'_>) -> Result<bool, ShapeError> {
    // The walk is only paid by requests that mention the header at all.
    if !(system.starts_with('[') && system.contains(BILLING_HEADER)) {
        return Ok(chain.feed(system.as_bytes()));
    }
    let (mut fed_to, mut more) = (0, true);
    for_each_element(system, |block| {
        let Some((start, end)) = span_of(system, block.text) else { return Ok(true) };
        if !is_billing_header(block.text) {
            return Ok(true);
        }
        more = chain.feed(system.get(fed_to..start).unwrap_or_default().as_bytes());
        fed_to = end;
        Ok(more)
    })?;
    Ok(more && chain.feed(system.get(fed_to..).unwrap_or_default().as_bytes()))
}

/// A `{"type": "text", "text": "x-anthropic-billing-header…"}` block. The text is compared as
/// written: the header holds no character JSON escapes.
fn is_billing_header(block: &str) -> bool {
    #[derive(Deserialize)]
    struct BlockView<'a> {
        #[serde(rename = "type", borrow, default)]
        kind: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        text: Option<&'a RawValue>,
    }
    if !block.contains(BILLING_HEADER) {
        return false;
    }
    let Ok(view) = serde_json::from_str::<BlockView<'_>>(block) else { return false };
    let text = view.text.and_then(|raw| string_contents(raw.get()));
    view.kind.as_deref() == Some("text") && text.is_some_and(|text| text.starts_with(BILLING_HEADER))
}

#[cfg(test)]
mod tests {
    use super::is_billing_header;

    #[test]
    fn only_a_text_block_opening_with_the_header_is_one() {
        let header = "x-anthropic-billing-header: cc_version=2.1.77.a1b; cc_entrypoint=cli; cch=3f9a1;";
        assert!(is_billing_header(&format!(r#"{{"type":"text","text":"{header}"}}"#)));
        assert!(is_billing_header(&format!(r#"{{ "text" : "{header}", "type" : "text" }}"#)));
        assert!(!is_billing_header(&format!(r#"{{"type":"text","text":"Say {header}"}}"#)), "not at the start");
        assert!(!is_billing_header(&format!(r#"{{"type":"image","text":"{header}"}}"#)), "not a text block");
        assert!(!is_billing_header(r#"{"type":"text","text":"You are Claude Code."}"#));
        assert!(!is_billing_header(&format!(r#""{header}""#)), "a string is no block");
    }
}
