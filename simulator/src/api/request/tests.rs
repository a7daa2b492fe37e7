//! Every prompt shape vLLM accepts, and the errors it gives for the rest.

use super::*;

fn completion(body: &str) -> Result<CompletionRequest, ApiError> {
    parse_completion(body.as_bytes())
}

fn chat(body: &str) -> Result<ChatRequest, ApiError> {
    parse_chat(body.as_bytes())
}

#[test]
fn completion_prompt_shapes() {
    let text = completion(r#"{"prompt": "hi all"}"#).unwrap();
    assert_eq!(text.prompts, vec![PromptInput::Text("hi all".to_owned())]);
    assert_eq!(text.prompts[0].tokens().len(), 2);

    let batch = completion(r#"{"prompt": ["a", "b c"]}"#).unwrap();
    assert_eq!(batch.prompts.len(), 2);

    let ids = completion(r#"{"prompt": [1, 2, 3]}"#).unwrap();
    assert_eq!(ids.prompts, vec![PromptInput::TokenIds(vec![1, 2, 3])]);

    let id_lists = completion(r#"{"prompt": [[1, 2], [3]]}"#).unwrap();
    assert_eq!(id_lists.prompts, vec![PromptInput::TokenIds(vec![1, 2]), PromptInput::TokenIds(vec![3])]);
}

#[test]
fn completion_options() {
    let request =
        completion(r#"{"model": "m", "prompt": "x", "max_tokens": 7, "stream": true, "stream_options": {"include_usage": true}, "temperature": 0.2, "n": 1, "ignore_eos": true}"#)
            .unwrap();
    assert_eq!(
        request.options,
        CommonOptions {
            model: Some("m".to_owned()),
            max_tokens: Some(7),
            stream: true,
            include_usage: true,
            ..CommonOptions::default()
        }
    );
    let defaults = completion(r#"{"prompt": "x", "max_tokens": null}"#).unwrap();
    assert_eq!(defaults.options, CommonOptions::default());
}

/// vLLM's `StreamOptions` (entrypoints/openai/protocol.py): `include_usage` defaults to true,
/// `continuous_usage_stats` to false; options without `stream` are refused unless empty.
#[test]
fn stream_options_follow_vllm_defaults_and_need_stream() {
    let options = |body: &str| completion(body).unwrap().options;
    let empty = options(r#"{"prompt": "x", "stream": true, "stream_options": {}}"#);
    assert!(empty.include_usage && !empty.continuous_usage, "{{}} asks for the final usage chunk");
    let continuous = options(r#"{"prompt": "x", "stream": true, "stream_options": {"continuous_usage_stats": true}}"#);
    assert!(continuous.include_usage && continuous.continuous_usage);
    let off = options(
        r#"{"prompt": "x", "stream": true, "stream_options": {"include_usage": false, "continuous_usage_stats": true}}"#,
    );
    assert!(!off.include_usage && !off.continuous_usage, "continuous usage needs include_usage");
    let null = options(r#"{"prompt": "x", "stream": true, "stream_options": {"include_usage": null}}"#);
    assert!(!null.include_usage, "an explicit null is falsy in vLLM");
    assert!(!options(r#"{"prompt": "x", "stream": true}"#).include_usage);
    assert!(!options(r#"{"prompt": "x", "stream_options": {}}"#).include_usage, "an empty object is not checked");
    assert!(!options(r#"{"prompt": "x", "stream_options": null}"#).include_usage);
    for body in [
        r#"{"prompt": "x", "stream_options": {"include_usage": true}}"#,
        r#"{"prompt": "x", "stream": false, "stream_options": {"include_usage": false}}"#,
    ] {
        let error = completion(body).unwrap_err();
        assert_eq!(
            (error.status, error.message.as_str()),
            (400, "Stream options can only be defined when `stream=True`.")
        );
    }
    let chat_error =
        chat(r#"{"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}}"#);
    assert_eq!(chat_error.unwrap_err().status, 400);
}

#[test]
fn completion_errors_are_400_with_the_field_named() {
    for (body, param) in [
        (r#"{"model": "m"}"#, Some("prompt")),
        (r#"{"prompt": []}"#, Some("prompt")),
        (r#"{"prompt": [-1]}"#, Some("prompt")),
        (r#"{"prompt": [999999999]}"#, Some("prompt")),
        (r#"{"prompt": "x", "max_tokens": 0}"#, Some("max_tokens")),
        (r#"{"prompt": ["a", 1]}"#, None),
        (r#"{"prompt": "x""#, None),
        ("not json", None),
    ] {
        let error = completion(body).unwrap_err();
        assert_eq!(error.status, 400, "{body}");
        assert_eq!(error.param.as_deref(), param, "{body}");
    }
    let too_many = format!(r#"{{"prompt": [{}]}}"#, vec!["\"x\""; MAX_BATCH_PROMPTS + 1].join(","));
    assert_eq!(completion(&too_many).unwrap_err().status, 400);
}

#[test]
fn chat_content_shapes_and_template() {
    let request = chat(
        r#"{"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:x"}}]},
            {"role": "assistant", "content": null}
        ], "max_completion_tokens": 5, "max_tokens": 9}"#,
    )
    .unwrap();
    assert_eq!(request.messages.len(), 3);
    assert_eq!(request.messages[1].content[1], ContentPart::Image("data:x".to_owned()));
    assert!(request.messages[2].content.is_empty());
    assert_eq!(request.options.max_tokens, Some(5), "max_completion_tokens wins");
    assert!(request.rendered_prompt().starts_with("<|system|>\nbe brief\n<|user|>\nlook\n"));
    assert!(request.rendered_prompt().ends_with("<|assistant|>\n"));
}

#[test]
fn chat_errors() {
    assert_eq!(chat(r#"{"model": "m"}"#).unwrap_err().param.as_deref(), Some("messages"));
    assert_eq!(chat(r#"{"messages": []}"#).unwrap_err().status, 400);
    assert_eq!(chat(r#"{"messages": [{"content": "x"}]}"#).unwrap_err().status, 400);
    let audio = r#"{"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}"#;
    assert_eq!(chat(audio).unwrap_err().status, 400);
    let zero = r#"{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0}"#;
    assert_eq!(chat(zero).unwrap_err().param.as_deref(), Some("max_completion_tokens"));
}

/// vLLM's `check_cache_salt_support` (entrypoints/openai/protocol.py): a non-empty string.
#[test]
fn cache_salt_is_a_non_empty_string() {
    assert_eq!(completion(r#"{"prompt": "x", "cache_salt": "t1"}"#).unwrap().options.cache_salt.as_deref(), Some("t1"));
    let chat_salt = chat(r#"{"messages": [{"role": "user", "content": "x"}], "cache_salt": "t2"}"#).unwrap();
    assert_eq!(chat_salt.options.cache_salt.as_deref(), Some("t2"));
    assert_eq!(completion(r#"{"prompt": "x", "cache_salt": null}"#).unwrap().options.cache_salt, None);
    for body in [r#"{"prompt": "x", "cache_salt": ""}"#, r#"{"prompt": "x", "cache_salt": 7}"#] {
        let error = completion(body).unwrap_err();
        assert_eq!(
            (error.status, error.message.as_str()),
            (400, "Parameter 'cache_salt' must be a non-empty string if provided.")
        );
    }
}

/// `n` as vLLM reads it: absent or null is 1, at least 1 and at most `VLLM_MAX_N_SEQUENCES`
/// (16384) with vLLM's messages (sampling_params.py `_verify_num_sequences`).
#[test]
fn n_is_read_and_bounded_as_vllm() {
    assert_eq!(completion(r#"{"prompt": "x"}"#).unwrap().n, 1);
    assert_eq!(chat(r#"{"messages": [{"role": "user", "content": "x"}], "n": null}"#).unwrap().n, 1);
    assert_eq!(completion(r#"{"prompt": ["x", "y"], "n": 3}"#).unwrap().n, 3);
    assert_eq!(chat(r#"{"messages": [{"role": "user", "content": "x"}], "n": 2, "temperature": 0}"#).unwrap().n, 2);
    assert_eq!(completion(r#"{"prompt": "x", "n": 16384}"#).unwrap().n, 16384);
    assert_eq!(completion(r#"{"prompt": "x", "n": 0}"#).unwrap_err().message, "n must be at least 1, got 0.");
    let too_many = completion(r#"{"prompt": "x", "n": 16385}"#).unwrap_err();
    assert_eq!(too_many.status, 400);
    assert!(too_many.message.starts_with("n must be at most 16384, got 16385."), "{}", too_many.message);
    assert_eq!(completion(r#"{"prompt": "x", "n": 1.5}"#).unwrap_err().status, 400);
    // vLLM's request models are pydantic's, in lax mode: a whole number in any form is an int.
    assert_eq!(completion(r#"{"prompt": "x", "n": 2.0}"#).unwrap().n, 2);
    assert_eq!(completion(r#"{"prompt": "x", "n": "3"}"#).unwrap().n, 3);
    assert_eq!(completion(r#"{"prompt": "x", "n": " +4.00 "}"#).unwrap().n, 4);
    assert_eq!(completion(r#"{"prompt": "x", "n": "-1"}"#).unwrap_err().message, "n must be at least 1, got -1.");
    // (`true` is 1 to pydantic's lax int, as to Python.)
    assert_eq!(completion(r#"{"prompt": "x", "n": true}"#).unwrap().n, 1);
    assert_eq!(completion(r#"{"prompt": "x", "n": false}"#).unwrap_err().message, "n must be at least 1, got 0.");
    for odd in ["\"2.5\"", "\"two\"", "\"\"", "{}", "[2]"] {
        let body = format!(r#"{{"prompt": "x", "n": {odd}}}"#);
        assert_eq!(completion(&body).unwrap_err().message, "n must be an int.", "{odd}");
    }
}

/// `best_of` as vLLM's V1 engine takes it: none, or 1, and never below `n`.
#[test]
fn best_of_is_refused_above_one_as_vllm_v1_refuses_it() {
    for none in [r#""best_of": null"#, r#""best_of": 0"#, r#""best_of": 1"#] {
        assert_eq!(completion(&format!(r#"{{"prompt": "x", {none}}}"#)).unwrap().n, 1, "{none}");
    }
    let refused = completion(r#"{"prompt": "x", "best_of": 4, "n": 2}"#).unwrap_err();
    assert_eq!((refused.status, refused.message.as_str()), (400, "vLLM V1 does not yet support best_of."));
    let fewer = chat(r#"{"messages": [{"role": "user", "content": "x"}], "n": 3, "best_of": 1}"#).unwrap_err();
    assert_eq!(fewer.message, "best_of must be greater than or equal to n, got n=3 and best_of=1.");
    let negative = completion(r#"{"prompt": "x", "best_of": -1}"#).unwrap_err();
    assert!(negative.message.starts_with("best_of must be greater than or equal to n"), "{}", negative.message);
    // Read as `n` is (pydantic's lax integers).
    let quoted = completion(r#"{"prompt": "x", "best_of": "2"}"#).unwrap_err();
    assert_eq!(quoted.message, "vLLM V1 does not yet support best_of.");
    assert_eq!(completion(r#"{"prompt": "x", "best_of": 1.0}"#).unwrap().n, 1);
    assert_eq!(completion(r#"{"prompt": "x", "best_of": "two"}"#).unwrap_err().message, "best_of must be an int.");
}

/// Flags and lengths as vLLM's pydantic models read them in lax mode: a client sending
/// `"stream": "true"` or `"max_tokens": 16.0` is served, as vLLM serves it.
#[test]
fn flags_and_lengths_are_read_in_pydantic_lax_mode() {
    for (stream, streams) in [("\"true\"", true), ("1", true), ("\"Yes\"", true), ("\"off\"", false), ("0", false)] {
        let body = format!(r#"{{"prompt": "x", "stream": {stream}}}"#);
        assert_eq!(completion(&body).unwrap().options.stream, streams, "{stream}");
        let body = format!(r#"{{"messages": [{{"role": "user", "content": "x"}}], "stream": {stream}}}"#);
        assert_eq!(chat(&body).unwrap().options.stream, streams, "{stream}");
    }
    // (Each as pydantic 2.14 reads it: `true` is 1, Python's `int` takes `1_6`, and pydantic-core
    // trims Unicode's white space.)
    let lengths =
        [("16.0", 16), ("\"16\"", 16), ("\" 16 \"", 16), ("\"1_6\"", 16), ("\"\\u200016.00\"", 16), ("true", 1)];
    for (length, tokens) in lengths {
        let body = format!(r#"{{"prompt": "x", "max_tokens": {length}}}"#);
        assert_eq!(completion(&body).unwrap().options.max_tokens, Some(tokens), "{length}");
        let body =
            format!(r#"{{"messages": [{{"role": "user", "content": "x"}}], "max_completion_tokens": {length}}}"#);
        assert_eq!(chat(&body).unwrap().options.max_tokens, Some(tokens), "{length}");
    }
    let usage = completion(r#"{"prompt": "x", "stream": "true", "stream_options": {"include_usage": "yes"}}"#).unwrap();
    assert!(usage.options.stream && usage.options.include_usage);
    let template = chat(r#"{"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": "false"}"#);
    assert!(!template.unwrap().add_generation_prompt);
    let refused = [
        r#""stream": "maybe""#,
        r#""stream": 2"#,
        r#""max_tokens": 1.5"#,
        r#""max_tokens": "many""#,
        r#""max_tokens": "1__6""#,
        r#""max_tokens": "_16""#,
        r#""max_tokens": "16.""#,
    ];
    for refused in refused {
        let body = format!(r#"{{"prompt": "x", {refused}}}"#);
        assert_eq!(completion(&body).unwrap_err().status, 400, "{refused}");
    }
}
