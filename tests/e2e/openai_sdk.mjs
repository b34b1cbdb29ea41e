// openai_sdk.mjs — drives a running kvserve with the official OpenAI Node SDK.
// Env: KVSERVE_URL (base URL ending in /v1), KVSERVE_MODEL (served model id),
// KVSERVE_PROMPT + KVSERVE_MAX_TOKENS + KVSERVE_EXPECT (optional golden greedy case).
// Exits 0 when every check passes; prints the first failure and exits 1 otherwise.
import OpenAI from "openai";
import assert from "node:assert/strict";

const client = new OpenAI({ baseURL: process.env.KVSERVE_URL, apiKey: "unused", maxRetries: 0, timeout: 30000 });
const model = process.env.KVSERVE_MODEL;
const prompt = process.env.KVSERVE_PROMPT ?? "Once upon a time";
const maxTokens = Number(process.env.KVSERVE_MAX_TOKENS ?? 24);
const expect = process.env.KVSERVE_EXPECT;

async function main() {
  const models = await client.models.list();
  assert.equal(models.data[0].id, model);

  const { data: c, request_id } = await client.completions
    .create({ model, prompt, max_tokens: maxTokens, temperature: 0 })
    .withResponse();
  assert.ok(request_id, "x-request-id exposed as request_id");
  assert.equal(c.object, "text_completion");
  assert.equal(c.choices[0].finish_reason, "length");
  assert.equal(c.usage.completion_tokens, maxTokens);
  if (expect !== undefined) assert.equal(c.choices[0].text, expect);

  let streamed = "";
  const s = await client.completions.create({ model, prompt, max_tokens: maxTokens, temperature: 0, stream: true });
  for await (const chunk of s) streamed += chunk.choices[0]?.text ?? "";
  assert.equal(streamed, c.choices[0].text, "streamed text equals the non-streamed text");

  const messages = [{ role: "user", content: "Tell me a story." }];
  const chat = await client.chat.completions.create({ model, messages, max_completion_tokens: 16, temperature: 0 });
  assert.equal(chat.choices[0].message.role, "assistant");
  let content = "", usage = null, roles = 0;
  const cs = await client.chat.completions.create({
    model, messages, max_completion_tokens: 16, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of cs) {
    if (chunk.usage) usage = chunk.usage;
    const d = chunk.choices[0]?.delta;
    if (d?.role) roles++;
    content += d?.content ?? "";
  }
  assert.equal(content, chat.choices[0].message.content);
  assert.equal(roles, 1);
  assert.equal(usage.completion_tokens, 16);
  assert.equal(usage.total_tokens, usage.prompt_tokens + 16);

  await assert.rejects(client.completions.create({ model: "no-such-model", prompt: "x" }), (e) => {
    assert.ok(e instanceof OpenAI.NotFoundError, String(e));
    assert.equal(e.code, "model_not_found");
    return true;
  });
  await assert.rejects(client.completions.create({ model, prompt: "x", temperature: 9 }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.param, "temperature");
    return true;
  });
  console.log("openai sdk e2e: ok");
}

main().catch((e) => {
  console.error("openai sdk e2e: FAILED:", e?.stack ?? e);
  process.exit(1);
});
