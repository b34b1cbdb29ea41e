// openai_tools.mjs — the official OpenAI Node SDK's tool-calling flow against a running kvserve:
// a tool definition, an answer with tool_calls (tool_choice names the function, so even a
// random-weight model must call it), the tool's result sent back in a `tool` message, and the
// final answer; the same call streamed, its argument deltas accumulated as the SDK does; the
// SDK's own tool runner (runTools) over both.
// Env: KVSERVE_URL (base URL ending in /v1), KVSERVE_MODEL. Exits 0 when every check passes.
import OpenAI from "openai";
import assert from "node:assert/strict";

const client = new OpenAI({ baseURL: process.env.KVSERVE_URL, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const model = process.env.KVSERVE_MODEL;

const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather for a city.",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string", maxLength: 24 },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
      },
      required: ["city", "unit"],
    },
  },
}];
const toolChoice = { type: "function", function: { name: "get_weather" } };

function checkArgs(text) {
  const args = JSON.parse(text); // valid JSON for the parameters schema
  assert.equal(typeof args.city, "string");
  assert.ok([...args.city].length <= 24, "maxLength");
  assert.ok(["celsius", "fahrenheit"].includes(args.unit), `unit ${args.unit}`);
  assert.deepEqual(Object.keys(args).filter((k) => k !== "city" && k !== "unit"), []);
  return args;
}

async function main() {
  const messages = [{ role: "user", content: "What is the weather in Paris?" }];
  const first = await client.chat.completions.create({
    model, messages, tools, tool_choice: toolChoice, max_completion_tokens: 200, temperature: 0,
  });
  const choice = first.choices[0];
  assert.equal(choice.finish_reason, "tool_calls");
  const calls = choice.message.tool_calls;
  assert.equal(calls.length, 1);
  assert.equal(calls[0].type, "function");
  assert.equal(calls[0].function.name, "get_weather");
  assert.ok(calls[0].id, "a tool call id");
  const args = checkArgs(calls[0].function.arguments);

  // the tool's result goes back with the call's id; the model answers in text
  messages.push(choice.message);
  messages.push({ role: "tool", tool_call_id: calls[0].id, content: JSON.stringify({ city: args.city, temperature: 18 }) });
  const final = await client.chat.completions.create({
    model, messages, tools, tool_choice: "none", max_completion_tokens: 12, seed: 11,
  });
  assert.equal(typeof final.choices[0].message.content, "string");
  assert.equal(final.choices[0].message.tool_calls ?? undefined, undefined);
  assert.ok(["length", "stop"].includes(final.choices[0].finish_reason));
  assert.ok(final.usage.prompt_tokens > first.usage.prompt_tokens, "the history grew");

  // streamed: deltas carry index, id, type and name first, the arguments in pieces
  const stream = await client.chat.completions.create({
    model, messages: messages.slice(0, 1), tools, tool_choice: toolChoice, max_completion_tokens: 200,
    temperature: 0, stream: true,
  });
  let name = "", argText = "", id = "", pieces = 0, finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.finish_reason) finish = c.finish_reason;
    for (const tc of c.delta?.tool_calls ?? []) {
      assert.equal(tc.index, 0);
      if (tc.id) id = tc.id;
      if (tc.function?.name) name += tc.function.name;
      if (tc.function?.arguments) {
        argText += tc.function.arguments;
        pieces++;
      }
    }
  }
  assert.equal(finish, "tool_calls");
  assert.equal(name, "get_weather");
  assert.ok(id.startsWith("call_"));
  assert.ok(pieces > 1, "the arguments arrive in pieces");
  assert.equal(argText, calls[0].function.arguments, "greedy: the same call, streamed or not");
  checkArgs(argText);

  // the SDK's own tool runner, streamed and not: it accumulates the deltas (refusing a call
  // without id, type, name or arguments), parses the arguments, runs the function and appends
  // the tool message itself
  for (const streamed of [false, true]) {
    const seen = [];
    const runner = client.chat.completions.runTools({
      model, messages: messages.slice(0, 1), tool_choice: toolChoice, max_completion_tokens: 200,
      temperature: 0, stream: streamed,
      tools: [{
        type: "function",
        function: {
          ...tools[0].function,
          parse: JSON.parse,
          function: (args) => { seen.push(checkArgs(JSON.stringify(args))); return { temperature: 18 }; },
        },
      }],
    });
    const done = await runner.finalChatCompletion();
    assert.equal(seen.length, 1, `the runner called the function once (stream ${streamed})`);
    assert.equal(done.choices[0].message.tool_calls[0].function.name, "get_weather");
    assert.deepEqual(JSON.parse(done.choices[0].message.tool_calls[0].function.arguments), seen[0],
      `the function got the call's arguments (stream ${streamed})`);
    const toolMsg = runner.messages.find((m) => m.role === "tool");
    assert.ok(toolMsg && toolMsg.tool_call_id === done.choices[0].message.tool_calls[0].id, "tool message");
  }

  // a tool_choice naming an unknown function is a 400 the SDK raises
  await assert.rejects(
    client.chat.completions.create({ model, messages, tools, tool_choice: { type: "function", function: { name: "nope" } } }),
    (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.param, "tool_choice");
      return true;
    });
  console.log("openai sdk tools e2e: ok");
}

main().catch((e) => {
  console.error("openai sdk tools e2e: FAILED:", e?.stack ?? e);
  process.exit(1);
});
