use super::*;
use crate::api::request::parse_chat;

#[test]
fn instructions_and_input_items_render_as_the_same_chat() {
    let body = br#"{"model":"m","instructions":"Be brief.","max_output_tokens":7,"stream":true,"input":[
        {"role":"user","content":"List files."},
        {"type":"function_call","call_id":"c","name":"ls","arguments":"{}"},
        {"type":"function_call_output","call_id":"c","output":"a.txt"},
        {"type":"reasoning","summary":[]},
        {"type":"message","role":"assistant","content":[{"type":"output_text","text":"One file."}]},
        {"role":"user","content":[{"type":"input_text","text":"Thanks"},{"type":"input_image","image_url":"data:x"}]}]}"#;
    let request = parse_responses(body).unwrap();
    assert_eq!(
        request.options,
        CommonOptions {
            model: Some("m".into()),
            max_tokens: Some(7),
            stream: true,
            include_usage: true,
            ..CommonOptions::default()
        }
    );
    assert_eq!(request.messages.len(), 6, "system, user, call, output, assistant, user; reasoning dropped");
    assert_eq!(request.messages[2], ChatMessage::text("assistant", "ls({})"));
    assert_eq!(request.messages[3], ChatMessage::text("tool", "a.txt"));
    let chat = br#"{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]}"#;
    let same = parse_responses(br#"{"instructions":"Be brief.","input":"hi"}"#).unwrap();
    assert_eq!(same.rendered_prompt(), parse_chat(chat).unwrap().rendered_prompt(), "one prompt, either API");
}

#[test]
fn refuses_what_vllm_refuses_with_the_parameter_named() {
    for (body, param) in [
        (&br#"{"model":"m"}"#[..], "input"),
        (br#"{"input":[]}"#, "input"),
        (br#"{"input":7}"#, "input"),
        (br#"{"input":[{"type":"computer_call"}]}"#, "input"),
        (br#"{"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}"#, "input"),
        (br#"{"input":"x","max_output_tokens":0}"#, "max_output_tokens"),
    ] {
        let error = parse_responses(body).unwrap_err();
        assert_eq!((error.status, error.param.as_deref()), (400, Some(param)), "{}", String::from_utf8_lossy(body));
    }
    assert_eq!(parse_responses(b"{").unwrap_err().status, 400);
}

#[test]
fn a_continuation_puts_the_stored_conversation_between_instructions_and_input() {
    let body = br#"{"instructions":"new","input":"next","previous_response_id":"resp_1"}"#;
    let mut request = parse_responses(body).unwrap();
    assert_eq!(request.previous_response_id.as_deref(), Some("resp_1"));
    let earlier = [ChatMessage::text("user", "first"), ChatMessage::text("assistant", "answer")];
    request.continue_from(&earlier);
    let roles: Vec<&str> = request.messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(request.input, [ChatMessage::text("user", "next")]);
}
