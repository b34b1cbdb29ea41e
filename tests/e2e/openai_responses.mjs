// openai_responses.mjs — the Responses API of a running kvserve through the official OpenAI Node
// SDK: responses.create plain and streamed, responses.stream's final response, a function tool
// round trip, text.format json_schema, previous_response_id, retrieve and delete.
// Env: KVSERVE_URL (base URL ending in /v1), KVSERVE_MODEL (served model id), KVSERVE_API_KEY.
// The model must carry a chat template that renders tools (the C test gives it a Hermes one).
// Exits 0 when every check passes; prints the first failure and exits 1 otherwise.
import OpenAI from "openai";
import assert from "node:assert/strict";

const client = new OpenAI({ baseURL: process.env.KVSERVE_URL, apiKey: process.env.KVSERVE_API_KEY ?? "unused", maxRetries: 0, timeout: 60000 });
const model = process.env.KVSERVE_MODEL;
const tools = [{
  type: "function", name: "get_weather", description: "Weather of a city", strict: true,
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 16 } }, required: ["city"], additionalProperties: false },
}];

async function plainAndStreamed() {
  const req = { model, input: "Tell me a story.", instructions: "You tell short stories.", max_output_tokens: 12, temperature: 0 };
  const r = await client.responses.create(req);
  assert.equal(r.object, "response");
  assert.ok(r.id.startsWith("resp_"), r.id);
  assert.equal(r.status, "incomplete");
  assert.equal(r.incomplete_details.reason, "max_output_tokens");
  assert.equal(r.instructions, req.instructions);
  assert.equal(r.output[0].type, "message");
  assert.equal(r.output[0].content[0].type, "output_text");
  assert.ok(r.output_text.length > 0, "output_text");
  assert.equal(r.usage.output_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + 12);

  const s = await client.responses.create({ ...req, stream: true });
  let text = "", seq = -1;
  const types = [];
  for await (const ev of s) {
    assert.equal(ev.sequence_number, seq + 1, "sequence numbers count up");
    seq = ev.sequence_number;
    types.push(ev.type);
    if (ev.type === "response.output_text.delta") text += ev.delta;
  }
  assert.deepEqual(types.slice(0, 4), ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]);
  assert.equal(types.at(-1), "response.incomplete");
  assert.ok(types.includes("response.output_text.done") && types.includes("response.output_item.done"));
  assert.equal(text, r.output_text, "streamed text equals the non-streamed text");

  // the stream helper's final response (it adds no output_text: the SDK does that for create)
  const fin = await client.responses.stream(req).finalResponse();
  assert.equal(fin.output.find((o) => o.type === "message").content[0].text, r.output_text, "responses.stream's final response");
}

async function toolRoundTrip() {
  const input = [{ role: "user", content: "What is the weather in Paris?" }];
  const t1 = await client.responses.create({ model, input, tools, tool_choice: "required", max_output_tokens: 64, temperature: 0 });
  const call = t1.output.find((o) => o.type === "function_call");
  assert.ok(call, JSON.stringify(t1.output));
  assert.equal(call.name, "get_weather");
  assert.ok(call.call_id.startsWith("call_"), call.call_id);
  assert.equal(typeof JSON.parse(call.arguments).city, "string");
  const named = await client.responses.create({
    model, input, tools, tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 64, temperature: 0,
  });
  assert.equal(named.output.find((o) => o.type === "function_call").name, "get_weather");
  // streamed calls: added, argument deltas, done
  let args = "";
  const s = await client.responses.create({ model, input, tools, tool_choice: "required", max_output_tokens: 64, temperature: 0, stream: true });
  for await (const ev of s) if (ev.type === "response.function_call_arguments.delta") args += ev.delta;
  assert.equal(args, call.arguments, "streamed arguments equal the non-streamed ones");
  // the tool's answer goes back as a function_call_output item
  const t2 = await client.responses.create({
    model, tools, max_output_tokens: 8, temperature: 0,
    input: [...input, call, { type: "function_call_output", call_id: call.call_id, output: "sunny, 21 C" }],
  });
  assert.ok(["completed", "incomplete"].includes(t2.status));
  assert.ok(t2.usage.input_tokens > t1.usage.input_tokens, "the call and its output are in the prompt");
}

async function jsonSchema() {
  const schema = {
    type: "object", additionalProperties: false, required: ["name", "age"],
    properties: { name: { type: "string", maxLength: 8 }, age: { type: "integer", minimum: 0, maximum: 120 } },
  };
  const r = await client.responses.create({
    model, input: "Describe a person.", max_output_tokens: 64, temperature: 0,
    text: { format: { type: "json_schema", name: "person", schema, strict: true } },
  });
  assert.equal(r.status, "completed");
  const o = JSON.parse(r.output_text);
  assert.equal(typeof o.name, "string");
  assert.ok(Number.isInteger(o.age) && o.age >= 0 && o.age <= 120, r.output_text);
  assert.deepEqual(Object.keys(o).sort(), ["age", "name"]);
  assert.equal(r.text.format.type, "json_schema");
}

async function conversation() {
  const a = await client.responses.create({ model, input: "My name is Ada and I like long stories.", max_output_tokens: 8, temperature: 0 });
  const b = await client.responses.create({ model, input: "What is my name?", previous_response_id: a.id, max_output_tokens: 8, temperature: 0 });
  assert.equal(b.previous_response_id, a.id);
  assert.ok(b.usage.input_tokens > a.usage.input_tokens + a.usage.output_tokens, "the earlier turn is in the prompt");
  assert.ok(b.usage.input_tokens_details.cached_tokens > 0, "the earlier turn comes from the prefix cache");
  const got = await client.responses.retrieve(a.id);
  assert.equal(got.id, a.id);
  assert.equal(got.output_text, a.output_text);
  await client.responses.delete(a.id);
  await assert.rejects(client.responses.retrieve(a.id), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(client.responses.create({ model, input: "x", previous_response_id: a.id }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.code, "previous_response_not_found");
    assert.equal(e.param, "previous_response_id");
    return true;
  });
  const unstored = await client.responses.create({ model, input: "x", store: false, max_output_tokens: 2 });
  await assert.rejects(client.responses.retrieve(unstored.id), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(client.responses.create({ model, input: "x", tools: [{ type: "web_search_preview" }] }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.param, "tools[0].type");
    return true;
  });
}

async function main() {
  await plainAndStreamed();
  await toolRoundTrip();
  await jsonSchema();
  await conversation();
  console.log("openai responses e2e: ok");
}

main().catch((e) => {
  console.error("openai responses e2e: FAILED:", e?.stack ?? e);
  process.exit(1);
});
