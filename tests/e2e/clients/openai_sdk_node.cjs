// Drives Envoy with wasm-epp through the official OpenAI Node.js SDK (tests/e2e/tests/openai_sdk.rs).
//
// The second SDK beside the Python one (openai_sdk.py), with its own HTTP stack: Node's fetch
// (undici) keeps connections alive its own way, sends its own headers and parses server-sent
// events itself. The cases are the Python script's, and so is the report: one JSON object (the
// pods that served each case) on stdout, or the failed case's name on stderr and exit code 1.
//
//     NODE_PATH=.node-openai/node_modules node openai_sdk_node.cjs --base-url http://127.0.0.1:PORT/v1 --pool ADDR,ADDR

"use strict";

const OpenAI = require("openai");

const FORGED_DESTINATION = "127.0.0.1:9";
const CONCURRENT_REQUESTS = 24;

function servedBy(response, pool, name) {
  const pod = response.headers.get("x-served-by");
  if (!pool.includes(pod)) {
    throw new Error(`${name}: served by ${pod}, not a pool member ${pool}`);
  }
  return pod;
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

async function chatWhole(client, model, pool) {
  const { data, response } = await client.chat.completions
    .create({ model, messages: [{ role: "user", content: "Say hello." }], max_tokens: 8 })
    .withResponse();
  check(data.choices[0].message.content, "chat_whole: empty content");
  check(["stop", "length"].includes(data.choices[0].finish_reason), `chat_whole: ${data.choices[0].finish_reason}`);
  check(data.usage.prompt_tokens > 0 && data.usage.completion_tokens > 0, "chat_whole: no usage");
  return servedBy(response, pool, "chat_whole");
}

async function chatStreamed(client, model, pool) {
  const { data: stream, response } = await client.chat.completions
    .create({
      model,
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Count to five." },
      ],
      max_tokens: 12,
      stream: true,
      stream_options: { include_usage: true },
    })
    .withResponse();
  const pod = servedBy(response, pool, "chat_streamed");
  let text = "";
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      text += choice.delta.content || "";
      finish = choice.finish_reason || finish;
    }
    usage = chunk.usage || usage;
  }
  check(text, "chat_streamed: no content deltas");
  check(["stop", "length"].includes(finish), `chat_streamed: finish_reason ${finish}`);
  check(usage && usage.completion_tokens > 0, "chat_streamed: no usage event");
  return pod;
}

async function completionWhole(client, model, pool) {
  const { data, response } = await client.completions
    .create({ model, prompt: "Once upon a time", max_tokens: 6 })
    .withResponse();
  check(data.choices[0].text, "completion_whole: empty text");
  return servedBy(response, pool, "completion_whole");
}

async function completionStreamed(client, model, pool) {
  const { data: stream, response } = await client.completions
    .create({ model, prompt: "The quick brown fox", max_tokens: 10, stream: true })
    .withResponse();
  const pod = servedBy(response, pool, "completion_streamed");
  let text = "";
  for await (const chunk of stream) {
    for (const choice of chunk.choices) text += choice.text;
  }
  check(text, "completion_streamed: no text");
  return pod;
}

// Text a tokenizer and a JSON parser must not choke on: emoji, right-to-left, NUL, lone escapes.
async function responsesWhole(client, model, pool) {
  const { data, response } = await client.responses
    .create({ model, instructions: "Be brief.", input: [{ role: "user", content: "Say hello." }], max_output_tokens: 8 })
    .withResponse();
  check(data.output_text, "responses_whole: empty output_text");
  check(data.usage.input_tokens > 0 && data.usage.output_tokens === 8, "responses_whole: usage");
  return servedBy(response, pool, "responses_whole");
}

async function responsesStreamed(client, model, pool) {
  const { data: stream, response } = await client.responses
    .create({ model, input: "Count to five.", max_output_tokens: 6, stream: true })
    .withResponse();
  const pod = servedBy(response, pool, "responses_streamed");
  let text = "";
  let completed = null;
  for await (const event of stream) {
    if (event.type === "response.output_text.delta") text += event.delta;
    if (event.type === "response.completed") completed = event.response;
  }
  check(text, "responses_streamed: no text deltas");
  check(completed && completed.output[0].content[0].text === text, "responses_streamed: no matching completed event");
  check(completed.usage.output_tokens === 6, "responses_streamed: usage");
  return pod;
}

async function oddText(client, model, pool) {
  const content = 'h\u00e9llo \u{1f600} \u05e9\u05dc\u05d5\u05dd \u0000 tab\t \\u0041 "quoted" '.repeat(20);
  const { data, response } = await client.chat.completions
    .create({ model, messages: [{ role: "user", content }], max_tokens: 4 })
    .withResponse();
  check(data.choices.length > 0, "odd_text: no choices");
  return servedBy(response, pool, "odd_text");
}

// A client naming the pod itself is not obeyed: the gateway picks from the pool.
async function forgedDestination(client, model, pool) {
  const { response } = await client.completions
    .create(
      { model, prompt: "route me where I say", max_tokens: 4 },
      { headers: { "x-gateway-destination-endpoint": FORGED_DESTINATION } },
    )
    .withResponse();
  return servedBy(response, pool, "forged_destination");
}

// `models.list()`: the gateway answers with the pool's models itself, in the shape the SDK parses.
async function modelList(client) {
  const { data: page, response } = await client.models.list().withResponse();
  check(response.headers.get("x-wasm-epp") === "local-reply", "model_list: not the gateway's answer");
  const models = [];
  for await (const model of page) models.push(model);
  check(
    models.every((m) => m.object === "model" && m.created > 0 && m.owned_by),
    `model_list: ${JSON.stringify(models)}`,
  );
  return models.map((m) => m.id);
}

// The gateway's 404 for a model no pod serves reaches the SDK as its NotFoundError.
async function unknownModel(client) {
  try {
    await client.chat.completions.create({
      model: "no-such-model",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 4,
    });
  } catch (error) {
    check(error instanceof OpenAI.NotFoundError, `unknown_model: ${error.constructor.name}: ${error.message}`);
    check(String(error.message).includes("no-such-model"), `unknown_model: message ${error.message}`);
    return error.status;
  }
  throw new Error("unknown_model: the request succeeded");
}

// Many requests at once through one client (fetch's connection pool): every one answered.
async function concurrent(client, model, pool) {
  const one = async (index) => {
    const { response } = await client.completions
      .create({ model, prompt: `request ${index}: ` + "lorem ipsum ".repeat((index % 7) + 1), max_tokens: 8 })
      .withResponse();
    return servedBy(response, pool, `concurrent[${index}]`);
  };
  return Promise.all(Array.from({ length: CONCURRENT_REQUESTS }, (_, i) => one(i)));
}

function argument(name, fallback) {
  const at = process.argv.indexOf(name);
  if (at >= 0 && at + 1 < process.argv.length) return process.argv[at + 1];
  if (fallback !== undefined) return fallback;
  throw new Error(`missing ${name}`);
}

async function main() {
  const baseURL = argument("--base-url");
  const pool = argument("--pool").split(",");
  const model = argument("--model", "sim-model");
  // No retries: a failure must show as one, not be hidden by the SDK's backoff.
  const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 30_000 });
  const served = {};
  const cases = [
    ["chat_whole", chatWhole],
    ["chat_streamed", chatStreamed],
    ["completion_whole", completionWhole],
    ["completion_streamed", completionStreamed],
    ["responses_whole", responsesWhole],
    ["responses_streamed", responsesStreamed],
    ["odd_text", oddText],
    ["forged_destination", forgedDestination],
  ];
  for (const [name, run] of cases) served[name] = await run(client, model, pool);
  served.model_list = await modelList(client);
  served.unknown_model_status = await unknownModel(client);
  served.concurrent = await concurrent(client, model, pool);
  served.sdk_version = require("openai/version").VERSION;
  console.log(JSON.stringify(served));
}

main().catch((error) => {
  console.error(`openai Node SDK case failed: ${error && error.stack ? error.stack : error}`);
  process.exit(1);
});
