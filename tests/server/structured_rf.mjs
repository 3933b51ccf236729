// response_format through the official OpenAI client (tests/server/package.json pins it), for
// tests/server/test_structured.sh: node structured_rf.mjs BASE_URL SCHEMA_JSON SEEDS -> JSON on stdout:
// {chat: [text...], chat_stream: [text...], cmpl: [text...], finish: [...], errors: {...}}
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';

const [base, schemaFile, seeds] = process.argv.slice(2);
const schema = JSON.parse(readFileSync(schemaFile, 'utf8'));
const client = new OpenAI({ baseURL: base, apiKey: 'none', timeout: 60000, maxRetries: 0 });
const model = 'm';
const messages = [{ role: 'user', content: 'Describe a pet as JSON.' }];
const response_format = { type: 'json_schema', json_schema: { name: 'pet', strict: true, schema } };
const out = { chat: [], chat_stream: [], cmpl: [], finish: [] };
for (let seed = 1; seed <= Number(seeds); seed++) {
  const r = await client.chat.completions.create({ model, messages, response_format, temperature: 1, seed, max_tokens: 200 });
  out.chat.push(r.choices[0].message.content);
  out.finish.push(r.choices[0].finish_reason);
  let s = '';
  for await (const c of await client.chat.completions.create({ model, messages, response_format, temperature: 1, seed, max_tokens: 200, stream: true }))
    s += c.choices[0]?.delta?.content ?? '';
  out.chat_stream.push(s);
  // /v1/completions with llama-server's json_schema field (the client passes it on as sent)
  const c = await client.completions.create({ model, prompt: 'Once upon a time', json_schema: schema, temperature: 1, seed, max_tokens: 200 });
  out.cmpl.push(c.choices[0].text);
  out.finish.push(c.choices[0].finish_reason);
}
out.errors = {};
for (const [k, rf] of Object.entries({
  unsupported: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { n: { type: 'number', minimum: 1 } } } } },
  bad_ref: { type: 'json_schema', json_schema: { name: 'x', schema: { $ref: '#/$defs/missing' } } },
})) {
  try {
    await client.chat.completions.create({ model, messages, response_format: rf, max_tokens: 4 });
    out.errors[k] = 'accepted';
  } catch (e) {
    out.errors[k] = { status: e.status, param: e.param, message: e.message };
  }
}
console.log(JSON.stringify(out));
