"""Drives Envoy with wasm-epp through Anthropic's official Python SDK (tests/e2e/tests/anthropic_sdk.rs).

vLLM serves the Anthropic Messages API (`/v1/messages`), and agents such as Claude Code call
it through this SDK (ANTHROPIC_BASE_URL pointed at the gateway). The SDK sends its own headers
(anthropic-version, x-api-key, x-stainless-*), parses the typed stream events strictly and
builds the final message from them. Each case below checks what a user of the SDK sees; the
script prints one JSON object (the pods that served each case) and exits non-zero with the
failed case's name if anything is off.

    python anthropic_sdk.py --base-url http://127.0.0.1:PORT --pool ADDR,ADDR --model sim-model
"""

import argparse
import json
import sys

import anthropic

SYSTEM = " ".join(f"rule {i}: keep the build green." for i in range(120))


def served_by(headers, pool, case):
    pod = headers.get("x-served-by")
    if pod not in pool:
        raise AssertionError(f"{case}: served by {pod!r}, not a pool member {pool}")
    return pod


def agent_turns(client, model, pool):
    """An agent's loop: each turn resends the conversation with the tool call and its result."""
    messages = [{"role": "user", "content": "Fix the failing build."}]
    pods = []
    for turn in range(4):
        raw = client.messages.with_raw_response.create(
            model=model, max_tokens=8, system=[{"type": "text", "text": SYSTEM}], messages=messages
        )
        message = raw.parse()
        assert message.type == "message" and message.role == "assistant", message
        assert message.content and message.content[0].type == "text" and message.content[0].text, message.content
        assert message.stop_reason == "max_tokens", message.stop_reason
        assert message.usage.input_tokens > 0 and message.usage.output_tokens == 8, message.usage
        pods.append(served_by(raw.headers, pool, f"agent_turns[{turn}]"))
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": message.content[0].text},
            {"type": "tool_use", "id": f"toolu_{turn}", "name": "bash", "input": {"command": "make"}},
        ]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{turn}", "content": f"error on line {turn}"},
        ]})
    assert len(set(pods)) == 1, f"agent_turns: the conversation moved between pods {pods}"
    return pods[0]


def streamed(client, model, pool):
    with client.messages.with_streaming_response.create(
        model=model, max_tokens=6, system="Be brief.", stream=True,
        messages=[{"role": "user", "content": "Count to five."}],
    ) as response:
        pod = served_by(response.headers, pool, "streamed")
        kinds, text, usage = [], "", None
        for event in response.parse():
            kinds.append(event.type)
            if event.type == "content_block_delta":
                text += event.delta.text
            elif event.type == "message_delta":
                usage = event.usage
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    assert text, "streamed: no text deltas"
    assert usage is not None and usage.output_tokens == 6, f"streamed: usage {usage}"
    return pod


def stream_helper(client, model, pool):
    """The SDK's own stream helper, which accumulates the final message from the events."""
    with client.messages.stream(
        model=model, max_tokens=5, messages=[{"role": "user", "content": "Say hi."}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text, (text, final)
    return "ok"


def forged_destination(client, model, pool):
    raw = client.messages.with_raw_response.create(
        model=model, max_tokens=4, messages=[{"role": "user", "content": "route me where I say"}],
        extra_headers={"x-gateway-destination-endpoint": "127.0.0.1:9"},
    )
    raw.parse()
    return served_by(raw.headers, pool, "forged_destination")


def unknown_model_status(client, model, pool):
    try:
        client.messages.create(model="no-such-model", max_tokens=4, messages=[{"role": "user", "content": "x"}])
    except anthropic.NotFoundError as error:
        return error.status_code
    raise AssertionError("unknown_model_status: no 404")


CASES = [agent_turns, streamed, stream_helper, forged_destination, unknown_model_status]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--pool", required=True)
    parser.add_argument("--model", default="sim-model")
    args = parser.parse_args()
    pool = args.pool.split(",")
    client = anthropic.Anthropic(base_url=args.base_url, api_key="unused", max_retries=0, timeout=30)
    report = {}
    for case in CASES:
        try:
            report[case.__name__] = case(client, args.model, pool)
        except Exception as error:  # the failing case's name and why, for the Rust test's message
            print(f"{case.__name__} failed: {error!r}", file=sys.stderr)
            sys.exit(1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
