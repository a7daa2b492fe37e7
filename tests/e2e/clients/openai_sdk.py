"""Drives Envoy with wasm-epp through the official OpenAI Python SDK (tests/e2e/tests/openai_sdk.rs).

Users point their own clients at the gateway, not ours: the SDK sends its own headers
(x-stainless-*), keeps connections alive through httpx, parses server-sent events strictly and
maps error bodies to exception classes. Each case below checks what a user of the SDK sees; the
script prints one JSON object (the pods that served each case) and exits non-zero with the
failed case's name if anything is off.

    python openai_sdk.py --base-url http://127.0.0.1:PORT/v1 --pool ADDR,ADDR --model sim-model
"""

import argparse
import asyncio
import json
import sys

import openai

FORGED_DESTINATION = "127.0.0.1:9"
CONCURRENT_REQUESTS = 24


def served_by(headers, pool, case):
    pod = headers.get("x-served-by")
    if pod not in pool:
        raise AssertionError(f"{case}: served by {pod!r}, not a pool member {pool}")
    return pod


def chat_whole(client, model, pool):
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
    )
    completion = raw.parse()
    assert completion.choices[0].message.content, "chat_whole: empty content"
    assert completion.choices[0].finish_reason in ("stop", "length"), completion.choices[0].finish_reason
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0, completion.usage
    return served_by(raw.headers, pool, "chat_whole")


def chat_streamed(client, model, pool):
    with client.chat.completions.with_streaming_response.create(
        model=model,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count to five."}],
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        pod = served_by(response.headers, pool, "chat_streamed")
        text, usage, finish = "", None, None
        for chunk in response.parse():
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
            usage = chunk.usage or usage
    assert text, "chat_streamed: no content deltas"
    assert finish in ("stop", "length"), f"chat_streamed: finish_reason {finish!r}"
    assert usage is not None and usage.completion_tokens > 0, "chat_streamed: no usage event"
    return pod


def chat_n_whole(client, model, pool):
    """`n=2`, as best-of-n harnesses ask: two choices (index 0 and 1), usage over both."""
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "Pick a number."}], max_tokens=5, n=2
    )
    completion = raw.parse()
    assert [choice.index for choice in completion.choices] == [0, 1], completion.choices
    assert all(choice.message.content for choice in completion.choices), "chat_n_whole: an empty choice"
    usage = completion.usage
    assert usage.completion_tokens == 10 and usage.total_tokens == usage.prompt_tokens + 10, usage
    return served_by(raw.headers, pool, "chat_n_whole")


def chat_n_streamed(client, model, pool):
    """`n=2` streamed: each chunk names its choice, each choice finishes once, and the usage
    event counts the prompt once (the prompt each chunk's running usage shows) and both choices."""
    with client.chat.completions.with_streaming_response.create(
        model=model,
        messages=[{"role": "user", "content": "Pick a number."}],
        max_tokens=6,
        n=2,
        stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    ) as response:
        pod = served_by(response.headers, pool, "chat_n_streamed")
        texts, finishes, prompts, usage = {}, {}, set(), None
        for chunk in response.parse():
            for choice in chunk.choices:
                texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
                if choice.finish_reason:
                    finishes.setdefault(choice.index, []).append(choice.finish_reason)
            if chunk.choices and chunk.usage:
                prompts.add(chunk.usage.prompt_tokens)
            elif chunk.usage:
                usage = chunk.usage
    assert sorted(texts) == [0, 1] and all(texts.values()), f"chat_n_streamed: {texts}"
    assert finishes == {0: ["length"], 1: ["length"]}, f"chat_n_streamed: finishes {finishes}"
    assert usage is not None and usage.completion_tokens == 12, f"chat_n_streamed: usage {usage}"
    assert prompts == {usage.prompt_tokens}, f"chat_n_streamed: prompt {usage.prompt_tokens}, chunks {prompts}"
    return pod


def completion_whole(client, model, pool):
    raw = client.completions.with_raw_response.create(model=model, prompt="Once upon a time", max_tokens=6)
    completion = raw.parse()
    assert completion.choices[0].text, "completion_whole: empty text"
    return served_by(raw.headers, pool, "completion_whole")


def completion_streamed(client, model, pool):
    with client.completions.with_streaming_response.create(
        model=model, prompt="The quick brown fox", max_tokens=10, stream=True
    ) as response:
        pod = served_by(response.headers, pool, "completion_streamed")
        text = "".join(choice.text for chunk in response.parse() for choice in chunk.choices)
    assert text, "completion_streamed: no text"
    return pod


def responses_whole(client, model, pool):
    """The Responses API (`responses.create`), as agents call it: instructions and input items."""
    raw = client.responses.with_raw_response.create(
        model=model,
        instructions="Be brief.",
        input=[{"role": "user", "content": "Say hello."}],
        max_output_tokens=8,
    )
    response = raw.parse()
    assert response.output_text, "responses_whole: empty output_text"
    assert response.usage.input_tokens > 0 and response.usage.output_tokens == 8, response.usage
    return served_by(raw.headers, pool, "responses_whole")


def responses_streamed(client, model, pool):
    with client.responses.with_streaming_response.create(
        model=model, input="Count to five.", max_output_tokens=6, stream=True
    ) as response:
        pod = served_by(response.headers, pool, "responses_streamed")
        text, completed = "", None
        for event in response.parse():
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type == "response.completed":
                completed = event.response
    assert text, "responses_streamed: no text deltas"
    assert completed is not None and completed.output_text == text, "responses_streamed: no matching completed event"
    assert completed.usage.output_tokens == 6, completed.usage
    return pod


def odd_text(client, model, pool):
    """Text a tokenizer and a JSON parser must not choke on: emoji, right-to-left, NUL, lone escapes."""
    content = "h\u00e9llo \U0001f600 \u05e9\u05dc\u05d5\u05dd \u0000 tab\t \\u0041 \"quoted\" " * 20
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": content}], max_tokens=4
    )
    assert raw.parse().choices, "odd_text: no choices"
    return served_by(raw.headers, pool, "odd_text")


def forged_destination(client, model, pool):
    """A client naming the pod itself is not obeyed: the gateway picks from the pool."""
    raw = client.completions.with_raw_response.create(
        model=model,
        prompt="route me where I say",
        max_tokens=4,
        extra_headers={"x-gateway-destination-endpoint": FORGED_DESTINATION},
    )
    raw.parse()
    return served_by(raw.headers, pool, "forged_destination")


def model_list(client):
    """`models.list()`: the gateway answers with the pool's models itself, in the shape the SDK parses."""
    raw = client.models.with_raw_response.list()
    assert raw.headers.get("x-wasm-epp") == "local-reply", f"model_list: not the gateway's answer {raw.headers}"
    models = list(raw.parse())
    assert all(m.object == "model" and m.created > 0 and m.owned_by for m in models), f"model_list: {models}"
    return [m.id for m in models]


def unknown_model(client):
    """The gateway's 404 for a model no pod serves reaches the SDK as its NotFoundError."""
    try:
        client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
    except openai.NotFoundError as error:
        assert "no-such-model" in str(error.message), f"unknown_model: message {error.message!r}"
        return error.status_code
    raise AssertionError("unknown_model: the request succeeded")


async def concurrent(base_url, model, pool):
    """Many requests at once through one async client (httpx's pool): every one answered."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=30) as client:

        async def one(index):
            raw = await client.completions.with_raw_response.create(
                model=model, prompt=f"request {index}: " + "lorem ipsum " * (index % 7 + 1), max_tokens=8
            )
            raw.parse()
            return served_by(raw.headers, pool, f"concurrent[{index}]")

        return await asyncio.gather(*(one(i) for i in range(CONCURRENT_REQUESTS)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--pool", required=True, help="comma-separated pod addresses")
    parser.add_argument("--model", default="sim-model")
    args = parser.parse_args()
    pool = args.pool.split(",")
    # No retries: a failure must show as one, not be hidden by the SDK's backoff.
    client = openai.OpenAI(base_url=args.base_url, api_key="unused", max_retries=0, timeout=30)
    served = {}
    try:
        cases = (chat_whole, chat_streamed, completion_whole, completion_streamed, responses_whole, responses_streamed)
        for case in cases + (odd_text, forged_destination, chat_n_whole, chat_n_streamed):
            served[case.__name__] = case(client, args.model, pool)
        served["model_list"] = model_list(client)
        served["unknown_model_status"] = unknown_model(client)
        served["concurrent"] = asyncio.run(concurrent(args.base_url, args.model, pool))
    except Exception as error:  # noqa: BLE001 - report any failure as the case's
        print(f"openai SDK case failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    served["sdk_version"] = openai.__version__
    print(json.dumps(served))
    return 0


if __name__ == "__main__":
    sys.exit(main())
