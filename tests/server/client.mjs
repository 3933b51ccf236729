// Drives caldrix serve with the official OpenAI client (tests/server/package.json pins it).
// node client.mjs BASE_URL API_KEY MODEL -> one JSON object of results on stdout; the shell test judges it.
import OpenAI from 'openai';

const [base, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: apiKey || 'none', timeout: 60000, maxRetries: 0 });
const out = {};
const messages = [{ role: 'user', content: 'Tell me a story.' }];

const chat = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
out.chat_text = chat.choices[0].message.content;
out.chat_finish = chat.choices[0].finish_reason;
out.chat_usage = chat.usage;
out.chat_object = chat.object;

let streamed = '', roles = [], finish = null, usage = null, chunks = 0;
const stream = await client.chat.completions.create({
  model, messages, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true },
});
for await (const c of stream) {
  chunks++;
  if (c.usage) usage = c.usage;
  for (const ch of c.choices) {
    if (ch.delta.role) roles.push(ch.delta.role);
    if (ch.delta.content) streamed += ch.delta.content;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
}
out.chat_stream_text = streamed;
out.chat_stream_roles = roles;
out.chat_stream_finish = finish;
out.chat_stream_usage = usage;
out.chat_stream_chunks = chunks;

const cmpl = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0 });
out.cmpl_text = cmpl.choices[0].text;
let cs = '';
for await (const c of await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0, stream: true }))
  cs += c.choices[0]?.text ?? '';
out.cmpl_stream_text = cs;

const lp = await client.chat.completions.create({ model, messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2 });
out.logprobs = lp.choices[0].logprobs;

const s1 = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 12, temperature: 1, seed: 7 });
const s2 = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 12, temperature: 1, seed: 7 });
out.seed_same = s1.choices[0].text === s2.choices[0].text;

const models = await client.models.list();
out.models = models.data;

// n = 2: two choices by index, streamed or not (the client hands chunks over as they come; each
// chunk's choices carry their index)
const n2 = await client.chat.completions.create({ model, messages, n: 2, max_tokens: 8, temperature: 0 });
const n2s = ['', ''];
for await (const c of await client.chat.completions.create({ model, messages, n: 2, max_tokens: 8, temperature: 0, stream: true }))
  for (const ch of c.choices) n2s[ch.index] += ch.delta.content ?? '';
out.n2 = { indexes: n2.choices.map((c) => c.index), texts: n2.choices.map((c) => c.message.content), stream_texts: n2s,
           completion_tokens: n2.usage.completion_tokens };
try {
  await client.completions.create({ model, prompt: 'Once', n: 2, best_of: 3 });
  out.best_of3 = 'accepted';
} catch (e) {
  out.best_of3 = { status: e.status, param: e.param };
}
console.log(JSON.stringify(out));
