#!/usr/bin/env bash
# tool_choice "required" and a named function (docs/api.md, "Structured output") through the
# official openai npm client (tests/server/structured.mjs; package.json pins it), on every chat
# template of ../shared/fixtures/chat whose tool calls take a form caldrix parses: Hermes/Qwen
# <tool_call> (hermes-3-tool-use, qwen2.5, qwen3), Mistral [TOOL_CALLS] (mistral-nemo, mistral-v0.3),
# Llama 3 JSON (llama3.1, llama3.2), Qwen3.5's <function=...> XML (qwen3.5: string parameters raw,
# others JSON, read back as vLLM's qwen3_coder parser reads them), Granite's <|tool_call|> and a JSON
# list (granite-3.3, on Llama 3's tokenizer: its template asks for the form in the system prompt),
# gpt-oss's harmony message to functions.NAME (gpt-oss, on Llama 3's tokenizer; tests/server/test_harmony.sh
# covers its channels);
# streamed and not. Random-weight models (caldrix synth
# tiny-qwen3-vocab / tiny-llama3-vocab) with the real tokenizers of ../shared/fixtures/tokenizers
# (Mistral's templates run on Mistral's tokenizer) sample at temperature 1, so only the grammar makes
# the reply a call: every reply must be tool calls naming a tool (the named one when named) whose
# arguments validate under its parameters schema (Python's jsonschema, Draft 2020-12, formats
# checked).
# isa-neutral: every reply must parse and validate; the grammar decides that, whatever the logits
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
F=../shared/fixtures

if ! (cd tests/server && { [ -f node_modules/openai/package.json ] && [ "$(node -p "require('./node_modules/openai/package.json').version")" = "$(node -p "require('./package.json').dependencies.openai")" ] || timeout 300 npm install --no-audit --no-fund --no-package-lock >"$tmp/npm.log" 2>&1; }); then
    bad "npm installs the pinned openai client (registry unreachable?)"; cat "$tmp/npm.log"; echo "$pass passed, $fail failed"; exit 1
fi

"$CALDRIX" synth --safetensors "$tmp/wq" --shape tiny-qwen3-vocab --type BF16 >/dev/null 2>&1 &&
"$CALDRIX" synth --safetensors "$tmp/wl" --shape tiny-llama3-vocab --type BF16 >/dev/null 2>&1 ||
    { bad "caldrix synth writes the two models"; echo "$pass passed, $fail failed"; exit 1; }
# one folder per template: the weights and tokenizer.json linked, tokenizer_config.json with the
# fixture's template, the tokenizer's BOS/EOS ids in config.json
python3 - "$tmp" "$F" <<'PY'
import json, os, sys
tmp, F = sys.argv[1], sys.argv[2]
pairs = {'hermes-3-tool-use': 'llama3', 'llama3.1': 'llama3', 'llama3.2': 'llama3', 'mistral-nemo': 'mistral',
         'mistral-v0.3': 'mistral', 'qwen2.5': 'qwen3', 'qwen3': 'qwen3', 'qwen3.5': 'qwen3', 'granite-3.3': 'llama3',
         'gpt-oss': 'llama3'}
ids = {'llama3': (128000, 128009), 'qwen3': (None, 151645), 'mistral': (1, 2)}
for tpl, tk in pairs.items():
    d = f'{tmp}/models/{tpl}'
    os.makedirs(d)
    w = f'{tmp}/wl' if tk == 'llama3' else f'{tmp}/wq'
    c = json.load(open(w + '/config.json'))
    c['bos_token_id'], c['eos_token_id'] = ids[tk]
    json.dump(c, open(d + '/config.json', 'w'))
    tc = json.load(open(f'{F}/tokenizers/{tk}/tokenizer_config.json'))
    tc['chat_template'] = open(f'{F}/chat/{tpl}/template.jinja').read()
    json.dump(tc, open(d + '/tokenizer_config.json', 'w'))
    os.symlink(os.path.abspath(w + '/model.safetensors'), d + '/model.safetensors')
    os.symlink(os.path.abspath(f'{F}/tokenizers/{tk}/tokenizer.json'), d + '/tokenizer.json')
PY
cat >"$tmp/tools.json" <<'J'
[{"type": "function", "function": {"name": "get_weather", "description": "The weather forecast for a city",
  "parameters": {"type": "object", "properties": {
    "city": {"type": "string", "description": "the city", "minLength": 1, "maxLength": 12},
    "days": {"type": "integer", "description": "how many days", "minimum": 1, "maximum": 7},
    "unit": {"enum": ["C", "F"], "description": "the unit"}},
   "required": ["city", "days"], "additionalProperties": false}}},
 {"type": "function", "function": {"name": "get_time", "description": "The time in a time zone",
  "parameters": {"type": "object", "properties": {
    "tz": {"type": "string", "description": "an IANA zone", "pattern": "^[A-Z][a-z]{1,6}/[A-Z][a-z]{1,6}$"},
    "when": {"type": "string", "description": "a date", "format": "date"},
    "at": {"$ref": "#/$defs/hm"}},
   "required": ["tz"], "additionalProperties": false,
   "$defs": {"hm": {"type": "object", "properties": {"h": {"type": "integer", "minimum": 0, "maximum": 23}},
                    "required": ["h"], "additionalProperties": false}}}}}]
J
MODELS="qwen3 hermes-3-tool-use llama3.1 llama3.2 mistral-nemo mistral-v0.3 qwen2.5 qwen3.5 granite-3.3 gpt-oss"
start_server tools --threads 2 --models-dir "$tmp/models" || { bad "the server starts on the template models"; echo "$pass passed, $fail failed"; exit 1; }
if node tests/server/structured.mjs "$URL/v1" "$tmp/tools.json" $MODELS >"$tmp/node.json" 2>"$tmp/node.err"; then
    for m in $MODELS; do
        for c in required named_stream required_stream named; do
            r=$(python3 - "$tmp/node.json" "$tmp/tools.json" "$m" "$c" <<'PY'
import json, sys
from jsonschema import Draft202012Validator, FormatChecker
out, tools, m, c = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
r = out[m].get(c)
if r is None:
    print('skip'); sys.exit()
if 'status' in r:
    print('error %s %s' % (r['status'], r['message'])); sys.exit()
by = {t['function']['name']: t['function']['parameters'] for t in tools}
calls = r['calls']
problems = []
if r['finish'] != 'tool_calls' or not calls or r['content']:
    problems.append('finish %s, %d calls, content %r' % (r['finish'], len(calls), (r['content'] or '')[:200]))
if c == 'required' and len(calls) != 1:
    problems.append('parallel_tool_calls false but %d calls' % len(calls))
if c.startswith('named') and (len(calls) != 1 or calls[0]['name'] != 'get_time'):
    problems.append('named get_time, got %s' % [x['name'] for x in calls])
for x in calls:
    if x['type'] != 'function' or not x['id'].startswith('call_') or x['name'] not in by:
        problems.append('call %r' % x); continue
    try:
        Draft202012Validator(by[x['name']], format_checker=FormatChecker()).validate(json.loads(x['arguments']))
    except Exception as e:
        problems.append('%s(%s): %s' % (x['name'], x['arguments'], str(e).splitlines()[0]))
print('ok ' + ' '.join('%s(%s)' % (x['name'], x['arguments']) for x in calls) if not problems else 'bad ' + '; '.join(problems))
PY
)
            [ "$r" = skip ] && continue
            check "$m, tool_choice $c: tool calls whose arguments validate: ${r:0:300}" [ "${r%% *}" = ok ]
        done
    done
    check "a named function not in tools is a 400 naming tool_choice.function.name" [ "$(jv "$tmp/node.json" "[d['qwen3']['unknown_name']['status'], d['qwen3']['unknown_name']['param']]")" = '[400, "tool_choice.function.name"]' ]
else
    bad "the openai client ran"; cat "$tmp/node.err"
fi
# Mistral's [TOOL_CALLS] is special token 5 of its tokenizer. logit_bias makes the model choose it:
# a forced call may begin with the model's own mark token (the grammar reads a mark by its text), and
# an unforced reply keeps the mark's text, where skipping special tokens would drop it and the calls
# after it would go unseen (llama.cpp's "preserved tokens").
tools=$(cat "$tmp/tools.json")
msg='[{"role": "user", "content": "Weather in Paris?"}]'
code=$(post /v1/chat/completions "{\"model\": \"mistral-v0.3\", \"messages\": $msg, \"tools\": $tools, \"tool_choice\": \"required\", \"parallel_tool_calls\": false, \"logit_bias\": {\"5\": 100}, \"return_tokens\": true, \"max_tokens\": 200, \"seed\": 3}" "$tmp/mark1.json")
check "mistral-v0.3, required, the model's own [TOOL_CALLS] token (id 5) first: 200, a call naming a tool ($(head -c 300 "$tmp/mark1.json"))" \
    [ "$code $(jv "$tmp/mark1.json" "[d['choices'][0]['tokens'][0], d['choices'][0]['finish_reason'], d['choices'][0]['message']['tool_calls'][0]['function']['name'] in ('get_weather', 'get_time')]")" = '200 [5, "tool_calls", true]' ]
code=$(post /v1/chat/completions "{\"model\": \"mistral-v0.3\", \"messages\": $msg, \"tools\": $tools, \"logit_bias\": {\"5\": 100}, \"max_tokens\": 1}" "$tmp/mark2.json")
check "mistral-v0.3, tools, no tool_choice: the model's [TOOL_CALLS] token keeps its text ($(head -c 300 "$tmp/mark2.json"))" \
    [ "$code $(jv "$tmp/mark2.json" "d['choices'][0]['message']['content']")" = '200 "[TOOL_CALLS]"' ]
code=$(post /v1/chat/completions "{\"model\": \"mistral-v0.3\", \"messages\": $msg, \"logit_bias\": {\"5\": 100}, \"max_tokens\": 1}" "$tmp/mark3.json")
check "mistral-v0.3, no tools: the special token's text is skipped as before ($(head -c 300 "$tmp/mark3.json"))" \
    [ "$code $(jv "$tmp/mark3.json" "d['choices'][0]['message']['content']")" = '200 ""' ]
[ "$fail" -eq 0 ] || { echo "--- the server's log:"; tail -20 "$tmp/tools.log"; }
stop_servers
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
