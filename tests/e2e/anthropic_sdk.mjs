// anthropic_sdk.mjs — Anthropic's Messages API of a running kvserve through the official Anthropic
// TypeScript SDK (@anthropic-ai/sdk): messages.create plain and streamed (the raw events and
// messages.stream's final message), a tool round trip, stop_sequences, count_tokens and an error.
// Env: KVSERVE_BASE (http://HOST:PORT, no /v1), KVSERVE_MODEL, KVSERVE_API_KEY (sent as x-api-key).
// The model must carry a chat template that renders tools (the C test gives it a Hermes one).
// Exits 0 when every check passes; prints the first failure and exits 1 otherwise.
import Anthropic from "@anthropic-ai/sdk";
import assert from "node:assert/strict";

const client = new Anthropic({ baseURL: process.env.KVSERVE_BASE, apiKey: process.env.KVSERVE_API_KEY ?? "unused", maxRetries: 0, timeout: 60000 });
const model = process.env.KVSERVE_MODEL;
const tools = [{
  name: "get_weather", description: "Weather of a city",
  input_schema: { type: "object", properties: { city: { type: "string", maxLength: 16 } }, required: ["city"], additionalProperties: false },
}];

async function plainAndStreamed() {
  const req = { model, max_tokens: 12, temperature: 0, system: "You tell short stories.", messages: [{ role: "user", content: "Tell me a story." }] };
  const m = await client.messages.create(req);
  assert.equal(m.type, "message");
  assert.equal(m.role, "assistant");
  assert.ok(m.id.startsWith("msg_"), m.id);
  assert.equal(m.stop_reason, "max_tokens");
  assert.equal(m.content[0].type, "text");
  assert.ok(m.content[0].text.length > 0);
  assert.equal(m.usage.output_tokens, 12);
  assert.ok(m.usage.input_tokens > 0 && m.usage.cache_read_input_tokens >= 0);

  const types = [];
  let text = "";
  const s = await client.messages.create({ ...req, stream: true });
  for await (const ev of s) {
    types.push(ev.type);
    if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") text += ev.delta.text;
  }
  assert.equal(types[0], "message_start");
  assert.equal(types.at(-1), "message_stop");
  assert.equal(types.at(-2), "message_delta");
  assert.ok(types.includes("content_block_start") && types.includes("content_block_stop"));
  assert.equal(text, m.content[0].text, "streamed text equals the non-streamed text");

  const stream = client.messages.stream(req);
  let onText = "";
  stream.on("text", (t) => (onText += t));
  const fin = await stream.finalMessage();
  assert.equal(fin.content[0].text, m.content[0].text);
  assert.equal(onText, m.content[0].text);
  assert.equal(fin.stop_reason, "max_tokens");
  assert.equal(fin.usage.output_tokens, 12);

  const n = await client.messages.countTokens({ model, system: req.system, messages: req.messages });
  assert.equal(n.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens + m.usage.cache_creation_input_tokens);

  // a stop sequence taken from the answer itself (two letters, past its first character)
  const stop = m.content[0].text.slice(1).match(/[A-Za-z]{2}/)?.[0];
  assert.ok(stop, m.content[0].text);
  const st = await client.messages.create({ ...req, stop_sequences: [stop] });
  assert.equal(st.stop_reason, "stop_sequence", JSON.stringify(st));
  assert.equal(st.stop_sequence, stop);
}

async function toolRoundTrip() {
  const messages = [{ role: "user", content: "What is the weather in Paris?" }];
  const t1 = await client.messages.create({ model, max_tokens: 64, temperature: 0, messages, tools, tool_choice: { type: "any", disable_parallel_tool_use: true } });
  assert.equal(t1.stop_reason, "tool_use", JSON.stringify(t1));
  const uses = t1.content.filter((b) => b.type === "tool_use");
  assert.equal(uses.length, 1);
  assert.equal(uses[0].name, "get_weather");
  assert.ok(uses[0].id.startsWith("toolu_"), uses[0].id);
  assert.equal(typeof uses[0].input.city, "string");
  const named = await client.messages.create({ model, max_tokens: 64, temperature: 0, messages, tools, tool_choice: { type: "tool", name: "get_weather" } });
  assert.equal(named.content.find((b) => b.type === "tool_use").name, "get_weather");
  // streamed: the tool_use block's input arrives as input_json_delta and is assembled by the SDK
  const fin = await client.messages.stream({ model, max_tokens: 64, temperature: 0, messages, tools, tool_choice: { type: "any" } }).finalMessage();
  assert.deepEqual(fin.content.find((b) => b.type === "tool_use").input, uses[0].input);
  const t2 = await client.messages.create({
    model, max_tokens: 8, temperature: 0, tools,
    messages: [...messages, { role: "assistant", content: t1.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: uses[0].id, content: "sunny, 21 C" }] }],
  });
  assert.equal(t2.type, "message");
  assert.ok(t2.usage.input_tokens + t2.usage.cache_read_input_tokens > t1.usage.input_tokens + t1.usage.cache_read_input_tokens);
}

async function errors() {
  await assert.rejects(client.messages.create({ model, max_tokens: 4, temperature: 1.5, messages: [{ role: "user", content: "x" }] }), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError, String(e));
    assert.equal(e.error.type, "error");
    assert.equal(e.error.error.type, "invalid_request_error");
    return true;
  });
  await assert.rejects(client.messages.create({ model: "claude-none", max_tokens: 4, messages: [{ role: "user", content: "x" }] }), (e) => {
    assert.ok(e instanceof Anthropic.NotFoundError, String(e));
    assert.equal(e.error.error.type, "not_found_error");
    return true;
  });
  const bad = new Anthropic({ baseURL: process.env.KVSERVE_BASE, apiKey: "wrong", maxRetries: 0 });
  if (process.env.KVSERVE_API_KEY)
    await assert.rejects(bad.messages.create({ model, max_tokens: 4, messages: [{ role: "user", content: "x" }] }), (e) => {
      assert.ok(e instanceof Anthropic.AuthenticationError, String(e));
      assert.equal(e.error.error.type, "authentication_error");
      return true;
    });
}

async function main() {
  await plainAndStreamed();
  await toolRoundTrip();
  await errors();
  console.log("anthropic sdk e2e: ok");
}

main().catch((e) => {
  console.error("anthropic sdk e2e: FAILED:", e?.stack ?? e);
  process.exit(1);
});
