#!/usr/bin/env bash
# gpt-oss's harmony format through `caldrix serve` (docs/api.md, "Reasoning" and "Tool calls"): a
# random-weight model (caldrix synth tiny-llama3-vocab) with gpt-oss's chat template
# (../shared/fixtures/chat/gpt-oss) and Llama 3's tokenizer whose reserved special tokens are renamed
# to harmony's marks (<|start|>, <|end|>, <|message|>, <|channel|>, <|constrain|>, <|return|>,
# <|call|>; <|return|> and <|call|> end the generation), so the prompt's marks are single special
# tokens as in o200k_harmony. No fixture here has gpt-oss's own tokenizer or weights, and random
# weights write no harmony by themselves: the replies are made by grammars, whose marks are spelled
# with ordinary tokens (the grammar engine never emits control tokens); that the marks as special
# tokens reach the parser is shown with logit_bias on one of them only. The parser's cases on the
# spec's own examples are in tests/server/test_sv_request.c. What this covers:
# - the template is recognised as harmony at load: tool_choice "required" / named force a
#   harmony call (to=functions.NAME, the body valid under the tool's schema), read back as
#   message.tool_calls with finish_reason "tool_calls", streamed and not;
# - a reply in two channels (a request's GBNF grammar writes analysis then final): reasoning_content
#   and content, and the stream's deltas joined equal them and never show a mark;
# - a call after reasoning with tool_choice "auto" (the grammar writes it): reasoning_content and
#   tool_calls, streamed and not;
# - a tool call and its result sent back as an OpenAI client sends them render as Python Jinja2
#   renders the conversation (tests/golden/harmony-roundtrip.json): the prompt's ids equal /tokenize's
#   of the golden text (today's date in it);
# - special tokens are kept in a harmony chat reply's text.
# isa-neutral: the grammar decides the shapes; only the sampled letters depend on the logits
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
F=../shared/fixtures

"$CALDRIX" synth --safetensors "$tmp/wl" --shape tiny-llama3-vocab --type BF16 >/dev/null 2>&1 ||
    { bad "caldrix synth writes the model"; echo "$pass passed, $fail failed"; exit 1; }
python3 - "$tmp" "$F" <<'PY'
import json, os, sys
tmp, F = sys.argv[1], sys.argv[2]
d = f'{tmp}/models/gpt-oss'
os.makedirs(d)
marks = ['<|start|>', '<|end|>', '<|message|>', '<|channel|>', '<|constrain|>', '<|return|>', '<|call|>']
ren = {f'<|reserved_special_token_{i}|>': m for i, m in enumerate(marks)}
tj = json.load(open(f'{F}/tokenizers/llama3/tokenizer.json'))
ids = {}
for t in tj['added_tokens']:
    if t['content'] in ren:
        t['content'] = ren[t['content']]
        ids[t['content']] = t['id']
json.dump(tj, open(d + '/tokenizer.json', 'w'))
tc = json.load(open(f'{F}/tokenizers/llama3/tokenizer_config.json'))
for k, t in tc.get('added_tokens_decoder', {}).items():
    if t['content'] in ren:
        t['content'] = ren[t['content']]
tc['chat_template'] = open(f'{F}/chat/gpt-oss/template.jinja').read()
tc['eos_token'] = '<|return|>'
json.dump(tc, open(d + '/tokenizer_config.json', 'w'))
c = json.load(open(f'{tmp}/wl/config.json'))
c['bos_token_id'], c['eos_token_id'] = 128000, [ids['<|return|>'], ids['<|call|>']]
json.dump(c, open(d + '/config.json', 'w'))
os.symlink(os.path.abspath(f'{tmp}/wl/model.safetensors'), d + '/model.safetensors')
open(f'{tmp}/message_id', 'w').write(str(ids['<|message|>']))
PY
start_server h --threads 2 --models-dir "$tmp/models" || { bad "the server starts on the harmony model"; echo "$pass passed, $fail failed"; exit 1; }

# gpt-oss's template writes each tool's description with "+": a tool without one is a template error (as in Jinja2)
TOOLS='[{"type":"function","function":{"name":"get_weather","description":"The weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string","minLength":1,"maxLength":12},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false}}},{"type":"function","function":{"name":"get_time","description":"The time in a zone","parameters":{"type":"object","properties":{"tz":{"type":"string","enum":["UTC","CET"]}},"required":["tz"],"additionalProperties":false}}}]'
MSG='"messages":[{"role":"user","content":"What is the weather in Paris?"}]'

# chat BODY NAME: the whole answer in $tmp/NAME.json and the stream (same seed) in $tmp/NAME.sse;
# prints both statuses
chat() {
    local s1 s2
    s1=$(post /v1/chat/completions "{\"model\":\"gpt-oss\",$1}" "$tmp/$2.json")
    s2=$(post /v1/chat/completions "{\"model\":\"gpt-oss\",\"stream\":true,$1}" "$tmp/$2.sse")
    echo "$s1 $s2"
}
# the whole answer and the stream's deltas joined, as one summary line (python), or why not
summary() {
    python3 - "$tmp/$1.json" "$tmp/$1.sse" <<'PY'
import json, sys
w = json.load(open(sys.argv[1]))['choices'][0]
m = w['message']
ev = [json.loads(b[6:]) for b in open(sys.argv[2]).read().split('\n\n') if b.startswith('data: {')]
r = c = ''
calls, fin = [], None
for e in ev:
    for ch in e.get('choices', []):
        d = ch.get('delta', {})
        r += d.get('reasoning_content') or ''
        c += d.get('content') or ''
        for t in d.get('tool_calls') or []:
            calls.append({'id': t['id'], 'type': t['type'], 'function': t['function']})
        fin = ch.get('finish_reason') or fin
print(json.dumps({'finish': w['finish_reason'], 'reasoning': m.get('reasoning_content'), 'content': m.get('content'),
                  'calls': [{'name': t['function']['name'], 'arguments': json.loads(t['function']['arguments'])}
                            for t in m.get('tool_calls') or []],
                  'stream_equal': (r == (m.get('reasoning_content') or '') and c == (m.get('content') or '')
                                   and fin == w['finish_reason']
                                   and [(t['function']['name'], t['function']['arguments']) for t in calls]
                                   == [(t['function']['name'], t['function']['arguments']) for t in m.get('tool_calls') or []]),
                  'marks_streamed': any('<|' in (ch.get('delta', {}).get('content') or '') + (ch.get('delta', {}).get('reasoning_content') or '')
                                        for e in ev for ch in e.get('choices', []))}))
PY
}

# 1. tool_choice required and named: one harmony call, its arguments valid
for choice in '"required"' '{"type":"function","function":{"name":"get_time"}}'; do
    st=$(chat "$MSG,\"tools\":$TOOLS,\"tool_choice\":$choice,\"seed\":7,\"max_tokens\":300" forced)
    [ "$st" = "200 200" ] || head -c 600 "$tmp/forced.json"
    check "tool_choice $choice on a harmony template: 200 streamed and not ($st)" [ "$st" = "200 200" ]
    s=$(summary forced 2>&1)
    r=$(python3 - "$s" "$choice" <<'PY'
import json, sys
s, choice = json.loads(sys.argv[1]), sys.argv[2]
ok = s['finish'] == 'tool_calls' and s['content'] is None and len(s['calls']) == 1 and s['stream_equal']
c = s['calls'][0] if s['calls'] else {}
if 'get_time' in choice:
    ok = ok and c.get('name') == 'get_time' and c['arguments'].get('tz') in ('UTC', 'CET') and len(c['arguments']) == 1
else:
    a = c.get('arguments', {})
    ok = ok and (c.get('name') == 'get_time' and a.get('tz') in ('UTC', 'CET') or
                 c.get('name') == 'get_weather' and isinstance(a.get('city'), str) and 1 <= len(a['city']) <= 12
                 and isinstance(a.get('days'), int) and 1 <= a['days'] <= 7)
print('ok' if ok else 'bad')
PY
)
    check "tool_choice $choice: one call whose arguments fit its schema, streamed = whole: $s" [ "$r" = ok ]
done

# 2. analysis then final (the grammar writes the channels): reasoning_content and content
G='root ::= \"<|channel|>analysis<|message|>\" [a-z]{3,12} \"<|end|><|start|>assistant<|channel|>final<|message|>\" [a-z]{3,12}'
st=$(chat "$MSG,\"grammar\":\"$G\",\"seed\":3,\"max_tokens\":60" chan)
check "a reply in two channels: 200 streamed and not ($st)" [ "$st" = "200 200" ]
s=$(summary chan 2>&1)
r=$(python3 -c "
import json, re, sys
s = json.loads(sys.argv[1])
print('ok' if s['finish'] == 'stop' and re.fullmatch('[a-z]{3,12}', s['reasoning'] or '') and re.fullmatch('[a-z]{3,12}', s['content'] or '')
      and s['stream_equal'] and not s['marks_streamed'] and not s['calls'] else 'bad')" "$s" 2>&1)
check "analysis → reasoning_content, final → content; the stream's deltas join to them, no mark shown: $s" [ "$r" = ok ]

# 3. reasoning, then a call (tool_choice auto; the grammar writes it)
G='root ::= \"<|channel|>analysis<|message|>\" [a-z]{3,12} \"<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\\\"city\\\": \\\"\" [a-z]{1,8} \"\\\", \\\"days\\\": 2}\"'
st=$(chat "$MSG,\"tools\":$TOOLS,\"grammar\":\"$G\",\"seed\":5,\"max_tokens\":300" auto)
check "reasoning then a call, tool_choice auto: 200 streamed and not ($st)" [ "$st" = "200 200" ]
[ "$st" = "200 200" ] || head -c 600 "$tmp/auto.json"
s=$(summary auto 2>&1)
r=$(python3 -c "
import json, re, sys
s = json.loads(sys.argv[1])
c = s['calls'][0] if len(s['calls']) == 1 else {}
print('ok' if s['finish'] == 'tool_calls' and re.fullmatch('[a-z]{3,12}', s['reasoning'] or '') and s['content'] is None
      and c.get('name') == 'get_weather' and re.fullmatch('[a-z]{1,8}', c['arguments']['city']) and c['arguments']['days'] == 2
      and s['stream_equal'] and not s['marks_streamed'] else 'bad')" "$s" 2>&1)
check "reasoning_content and the call in tool_calls, finish_reason tool_calls, streamed = whole: $s" [ "$r" = ok ]

# 4. the call and its result sent back (an OpenAI client's form) render as Jinja2 renders them
python3 - "$tmp" <<'PY'
import datetime, json, re, sys
tmp = sys.argv[1]
g = json.load(open('tests/golden/harmony-roundtrip.json'))
today = datetime.date.today().strftime('%Y-%m-%d')
for c in g['cases']:
    text = re.sub(r'Current date: \d{4}-\d{2}-\d{2}', 'Current date: ' + today, c['rendered'])
    json.dump({'content': text, 'add_special': False}, open(f"{tmp}/tok_{c['name']}.json", 'w'))
    json.dump({'model': 'gpt-oss', 'messages': c['openai_messages'], 'tools': c['extra']['tools'], 'max_tokens': 1,
               'return_tokens': True, 'temperature': 0}, open(f"{tmp}/rt_{c['name']}.json", 'w'))
PY
for name in after_the_result a_later_turn; do
    s1=$(post /tokenize "@$tmp/tok_$name.json" "$tmp/tok_$name.out")
    s2=$(post /v1/chat/completions "@$tmp/rt_$name.json" "$tmp/rt_$name.out")
    n1=$(jv "$tmp/tok_$name.out" "len(d['tokens'])")
    n2=$(jv "$tmp/rt_$name.out" "d['usage']['prompt_tokens']")
    check "$name: the conversation sent back renders as Jinja2's golden ($s1 $s2; prompt tokens $n2, golden's $n1)" \
        [ "$s1 $s2" = "200 200" -a -n "$n1" -a "$n1" = "$n2" ]
done

# 5. special tokens stay in a harmony chat reply's text (its marks are special tokens): +100 on
# <|message|> makes every token that mark; the text is no message, so it is content as written
MID=$(cat "$tmp/message_id")
st=$(post /v1/chat/completions "{\"model\":\"gpt-oss\",$MSG,\"temperature\":0,\"max_tokens\":3,\"logit_bias\":{\"$MID\":100}}" "$tmp/sp.json")
check "special tokens are kept in the text: 3 x <|message|> (id $MID) is the content ($st $(jv "$tmp/sp.json" "d['choices'][0]['message']['content']"))" \
    [ "$st" = 200 -a "$(jv "$tmp/sp.json" "d['choices'][0]['message']['content']")" = '"<|message|><|message|><|message|>"' ]

[ "$fail" -eq 0 ] || { echo "--- the server's log:"; tail -20 "$tmp/h.log"; }
stop_servers
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
