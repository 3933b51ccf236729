// /v1/embeddings through the official OpenAI client (tests/server/package.json pins it), for
// tests/server/test_serve_embed.sh: node embed.mjs BASE_URL SPEC.json -> one JSON object on stdout; the
// shell test judges it against the fixtures' PyTorch goldens.
// SPEC: {"text_model", "texts": [...], "ids_model", "ids": [[...]], "mrl_model", "mrl_ids": [[...]], "mrl_dims"}
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';

const [base, specPath] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(specPath, 'utf8'));
const client = new OpenAI({ baseURL: base, apiKey: 'none', timeout: 60000, maxRetries: 0 });
const out = {};
const vecs = (r) => r.data.map((d) => Array.from(d.embedding));

// texts: float, the client's default (it asks for base64 and decodes it), and base64 as sent
let r = await client.embeddings.create({ model: spec.text_model, input: spec.texts, encoding_format: 'float' });
out.text_float = vecs(r);
out.text_usage = r.usage;
out.text_object = [r.object, r.data.map((d) => d.object), r.data.map((d) => d.index), r.model];
r = await client.embeddings.create({ model: spec.text_model, input: spec.texts });
out.text_default = vecs(r);
r = await client.embeddings.create({ model: spec.text_model, input: spec.texts, encoding_format: 'base64' });
out.text_b64 = r.data.map((d) => d.embedding);
r = await client.embeddings.create({ model: spec.text_model, input: spec.texts[0] });
out.text_one = vecs(r);

// token ids: one input as an array of ids, several as arrays of ids
r = await client.embeddings.create({ model: spec.ids_model, input: spec.ids, encoding_format: 'float' });
out.ids_float = vecs(r);
out.ids_usage = r.usage;
r = await client.embeddings.create({ model: spec.ids_model, input: spec.ids[0] });
out.ids_one = vecs(r);

// Matryoshka: dimensions on a model that declares it; refused on one that does not, and past the size
r = await client.embeddings.create({ model: spec.mrl_model, input: spec.mrl_ids, dimensions: spec.mrl_dims });
out.mrl = vecs(r);
for (const [k, req] of [['dims_undeclared', { model: spec.text_model, input: 'x', dimensions: 8 }],
                        ['dims_too_big', { model: spec.mrl_model, input: spec.mrl_ids[0], dimensions: 100000 }],
                        ['empty_string', { model: spec.text_model, input: ['a', ''] }],
                        ['empty_array', { model: spec.text_model, input: [] }]]) {
  try {
    await client.embeddings.create(req);
    out[k] = 'accepted';
  } catch (e) {
    out[k] = { status: e.status, param: e.param, message: e.message };
  }
}

// 16 clients at once, mixing lengths (1..3 inputs of the texts each): every vector is compared with its
// single-request vector as base64 bytes
const n = spec.texts.length;
const single = [];
for (let i = 0; i < n; i++)
  single.push((await client.embeddings.create({ model: spec.text_model, input: [spec.texts[i]], encoding_format: 'base64' })).data[0].embedding);
const jobs = [];
for (let c = 0; c < 16; c++) {
  const pick = [];
  for (let k = 0; k <= c % 3; k++) pick.push((c * 5 + k * 7) % n);
  jobs.push(client.embeddings.create({ model: spec.text_model, input: pick.map((i) => spec.texts[i]), encoding_format: 'base64' })
    .then((res) => res.data.map((d, k) => d.embedding === single[pick[k]])));
}
const same = (await Promise.all(jobs)).flat();
out.concurrent = { vectors: same.length, same: same.filter((x) => x).length };
console.log(JSON.stringify(out));
