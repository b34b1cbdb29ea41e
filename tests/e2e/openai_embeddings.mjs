// openai_embeddings.mjs — /v1/embeddings of a running kvserve through the official OpenAI Node SDK:
// embeddings.create with the SDK's default encoding (it asks for base64 and decodes it), with
// float, with several inputs and with dimensions.
// Env: KVSERVE_URL (base URL ending in /v1), KVSERVE_MODEL, KVSERVE_DIM (the model's size).
// Exits 0 when every check passes; prints the first failure and exits 1 otherwise.
import OpenAI from "openai";
import assert from "node:assert/strict";

const client = new OpenAI({ baseURL: process.env.KVSERVE_URL, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const model = process.env.KVSERVE_MODEL;
const dim = Number(process.env.KVSERVE_DIM);

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

async function main() {
  const a = await client.embeddings.create({ model, input: "The food was delicious" });
  assert.equal(a.object, "list");
  assert.equal(a.data.length, 1);
  assert.equal(a.data[0].embedding.length, dim);
  assert.ok(Math.abs(norm(a.data[0].embedding) - 1) < 1e-4, "normalised");
  assert.equal(a.usage.prompt_tokens, a.usage.total_tokens);

  const f = await client.embeddings.create({ model, input: "The food was delicious", encoding_format: "float" });
  for (let i = 0; i < dim; i++) assert.ok(Math.abs(f.data[0].embedding[i] - a.data[0].embedding[i]) < 1e-6, "base64 decodes to the floats");

  const many = await client.embeddings.create({ model, input: ["The food was delicious", "The waiter was friendly", "Rain"] });
  assert.deepEqual(many.data.map((d) => d.index), [0, 1, 2]);
  assert.ok(many.data.every((d) => d.embedding.length === dim));

  const short = await client.embeddings.create({ model, input: "The food was delicious", dimensions: 8 });
  assert.equal(short.data[0].embedding.length, 8);
  assert.ok(Math.abs(norm(short.data[0].embedding) - 1) < 1e-4);
  console.log("openai embeddings e2e: ok");
}

main().catch((e) => {
  console.error("openai embeddings e2e: FAILED:", e?.stack ?? e);
  process.exit(1);
});
