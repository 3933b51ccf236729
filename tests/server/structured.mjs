// Forced tool calls through the official OpenAI client (tests/server/package.json pins it), for
// tests/server/test_structured_tools.sh: node structured.mjs BASE_URL TOOLS_JSON MODEL... -> one JSON
// object {model: {case: result}} on stdout; the shell test judges it (Python's jsonschema).
// A result is {finish, calls: [{name, arguments}], content} or {status, param, code, message} (an error).
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';

const [base, toolsFile, ...models] = process.argv.slice(2);
const tools = JSON.parse(readFileSync(toolsFile, 'utf8'));
const client = new OpenAI({ baseURL: base, apiKey: 'none', timeout: 120000, maxRetries: 0 });
const messages = [{ role: 'user', content: 'What is the weather in Paris for three days?' }];
const named = { type: 'function', function: { name: tools[1].function.name } };

async function once(model, tool_choice, stream, extra = {}) {
  const req = { model, messages, tools, tool_choice, max_tokens: 160, temperature: 1, seed: 11, ...extra };
  try {
    if (!stream) {
      const r = await client.chat.completions.create(req);
      const m = r.choices[0].message;
      return { finish: r.choices[0].finish_reason, content: m.content,
               calls: (m.tool_calls ?? []).map((c) => ({ id: c.id, type: c.type, name: c.function.name, arguments: c.function.arguments })) };
    }
    const calls = [];
    let finish = null, content = '';
    for await (const c of await client.chat.completions.create({ ...req, stream: true })) {
      for (const ch of c.choices) {
        if (ch.delta.content) content += ch.delta.content;
        for (const tc of ch.delta.tool_calls ?? []) {
          calls[tc.index] ??= { id: '', type: '', name: '', arguments: '' };
          if (tc.id) calls[tc.index].id += tc.id;
          if (tc.type) calls[tc.index].type = tc.type;
          if (tc.function?.name) calls[tc.index].name += tc.function.name;
          if (tc.function?.arguments) calls[tc.index].arguments += tc.function.arguments;
        }
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    return { finish, content: content || null, calls, streamed: true };
  } catch (e) {
    return { status: e.status, param: e.param, code: e.code, message: e.message };
  }
}

const out = {};
for (const model of models) {
  out[model] = {
    required: await once(model, 'required', false, { parallel_tool_calls: false }),
    named_stream: await once(model, named, true),
  };
}
// one template through every combination
const m0 = models[0];
out[m0].required_stream = await once(m0, 'required', true);
out[m0].named = await once(m0, named, false);
out[m0].unknown_name = await once(m0, { type: 'function', function: { name: 'no_such_tool' } }, false);
console.log(JSON.stringify(out));
