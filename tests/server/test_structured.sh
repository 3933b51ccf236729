#!/usr/bin/env bash
# Structured output on /v1/chat/completions and /v1/completions (docs/api.md, "Structured output"),
# on the bundled stories260K model at temperature 1 with several seeds: response_format json_schema
# through the official openai npm client (tests/server/structured_rf.mjs), streamed and not, and
# llama-server's json_schema field on completions: every output validates under the schema with
# Python's jsonschema (Draft 2020-12, formats checked); json_object outputs parse as objects; GBNF
# grammar outputs match the same language as a Python regex; logprobs are those of the masked
# distribution; a constrained request gives the same tokens and logprob bits alone and batched;
# bad schemas and grammars are 400s naming the field, the place and the reason. Forced tool calls
# on real chat templates: test_structured_tools.sh.
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh

start_server bundled --threads 1 || { bad "the server starts"; echo "$pass passed, $fail failed"; exit 1; }
cat >"$tmp/s.json" <<'J'
{"type": "object", "properties": {
  "name": {"type": "string", "minLength": 1, "maxLength": 10},
  "age": {"type": "integer", "minimum": 0, "maximum": 30},
  "kind": {"enum": ["cat", "dog", "fish"]},
  "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,5}$"}, "maxItems": 3},
  "owner": {"$ref": "#/$defs/person"},
  "born": {"type": "string", "format": "date"}},
 "required": ["name", "age", "kind"], "additionalProperties": false,
 "$defs": {"person": {"type": "object", "properties": {"first": {"type": "string", "maxLength": 6},
                                                       "pets": {"type": "integer", "minimum": 1, "maximum": 9}},
                      "required": ["first"], "additionalProperties": false}}}
J
# validate FILE_OF_TEXTS_JSON: each text validates under s.json ("ok N", or the first failure)
validate() {
    python3 - "$tmp/s.json" "$1" <<'PY'
import json, sys
from jsonschema import Draft202012Validator, FormatChecker
v = Draft202012Validator(json.load(open(sys.argv[1])), format_checker=FormatChecker())
texts = json.load(open(sys.argv[2]))
for t in texts:
    try:
        v.validate(json.loads(t))
    except Exception as e:
        print('bad %r: %s' % (t[:200], str(e).splitlines()[0])); sys.exit()
print('ok %d' % len(texts))
PY
}

# ---- response_format json_schema through the openai client, and json_schema on completions ----
if (cd tests/server && { [ -f node_modules/openai/package.json ] && [ "$(node -p "require('./node_modules/openai/package.json').version")" = "$(node -p "require('./package.json').dependencies.openai")" ] || timeout 300 npm install --no-audit --no-fund --no-package-lock >"$tmp/npm.log" 2>&1; }); then
    if node tests/server/structured_rf.mjs "$URL/v1" "$tmp/s.json" 4 >"$tmp/rf.json" 2>"$tmp/rf.err"; then
        jv "$tmp/rf.json" "d['chat']" >"$tmp/chat.json"; jv "$tmp/rf.json" "d['cmpl']" >"$tmp/cmpl.json"
        r=$(validate "$tmp/chat.json"); check "response_format json_schema (openai client, chat, 4 seeds at temperature 1): every reply validates ($r)" [ "$r" = "ok 4" ]
        check "... streamed, the same texts" [ "$(jv "$tmp/rf.json" "d['chat'] == d['chat_stream']")" = true ]
        r=$(validate "$tmp/cmpl.json"); check "llama-server's json_schema on /v1/completions (openai client, 4 seeds): every text validates ($r)" [ "$r" = "ok 4" ]
        check "... and every request ends with finish_reason stop" [ "$(jv "$tmp/rf.json" "sorted(set(d['finish']))")" = '["stop"]' ]
        check "an unsupported keyword is a 400 naming the field, its path and the keyword (openai client)" [ "$(jv "$tmp/rf.json" "[d['errors']['unsupported']['status'], d['errors']['unsupported']['param'], '#/properties/n: minimum' in d['errors']['unsupported']['message']]")" = '[400, "response_format.json_schema.schema", true]' ]
        check "a \$ref to nowhere is a 400 saying so (openai client)" [ "$(jv "$tmp/rf.json" "[d['errors']['bad_ref']['status'], 'points to nothing' in d['errors']['bad_ref']['message']]")" = '[400, true]' ]
    else
        bad "the openai client ran"; cat "$tmp/rf.err"
    fi
else
    bad "npm installs the pinned openai client (registry unreachable?)"; cat "$tmp/npm.log"
fi

# ---- response_format json_object: any JSON object. Random strings run long: a bias toward '}' (the
# token that spells it after a letter; a bare '}' brings SentencePiece's space token along) ends
# most objects inside max_tokens; those cut by the length are checked as prefixes ----
brace=$(curl -s -m 10 -H 'Content-Type: application/json' -d '{"content":"a}"}' "$URL/tokenize" | python3 -c "import json,sys; print(json.load(sys.stdin)['tokens'][-1])")
for s in 1 2 3 4; do
    post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"JSON please\"}],\"response_format\":{\"type\":\"json_object\"},\"temperature\":1,\"seed\":$s,\"max_tokens\":300,\"logit_bias\":{\"$brace\":10}}" "$tmp/jo$s.json" >/dev/null
done
check "response_format json_object (4 seeds): each reply that stops is one JSON object (at least 2 stop), the others open one" [ "$(python3 -c "
import json, sys
n, ok = 0, True
for f in sys.argv[1:]:
    c = json.load(open(f))['choices'][0]
    if c['finish_reason'] == 'stop':
        n += 1; ok = ok and isinstance(json.loads(c['message']['content']), dict)
    else:
        ok = ok and c['message']['content'].startswith('{')
print(ok and n >= 2)" "$tmp"/jo[1234].json 2>&1)" = True ]

# ---- grammar (GBNF), chat and completions; the same language as a Python regex ----
G='root ::= [a-z]+ (\" \" [a-z]+){1,4} (\".\" | \"!\")'
for s in 1 2 3; do
    post /v1/completions "{\"prompt\":\"Once upon a time\",\"grammar\":\"$G\",\"temperature\":1,\"seed\":$s,\"max_tokens\":80}" "$tmp/g$s.json" >/dev/null
    post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"grammar\":\"$G\",\"temperature\":1,\"seed\":$s,\"max_tokens\":80,\"stream\":true}" "$tmp/gc$s.sse" >/dev/null
    sse "$tmp/gc$s.sse" >"$tmp/gc$s.json"
done
check "grammar on /v1/completions (3 seeds): each text is 2-5 lowercase words and . or !" [ "$(python3 -c "
import json, re, sys
print(all(re.fullmatch(r'[a-z]+( [a-z]+){1,4}[.!]', json.load(open(f))['choices'][0]['text']) for f in sys.argv[1:]))" "$tmp"/g[123].json 2>&1)" = True ]
check "grammar on /v1/chat/completions, streamed (3 seeds): the same language" [ "$(python3 -c "
import json, re, sys
print(all(re.fullmatch(r'[a-z]+( [a-z]+){1,4}[.!]', ''.join(c['choices'][0]['delta'].get('content') or '' for c in json.load(open(f))[:-1] if c['choices'])) for f in sys.argv[1:]))" "$tmp"/gc[123].json 2>&1)" = True ]

# ---- logprobs are those of the masked distribution: the allowed tokens' probabilities sum to 1 ----
post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"grammar":"root ::= [abc] \".\"","temperature":1,"seed":2,"max_tokens":4,"logprobs":true,"top_logprobs":8}' "$tmp/lp.json" >/dev/null
check "logprobs under a grammar: the first token's alternatives are a, b or c only and their probabilities sum to 1" [ "$(python3 -c "
import json, math, sys
e = json.load(open(sys.argv[1]))['choices'][0]['logprobs']['content'][0]
alts = [a for a in e['top_logprobs'] if a['logprob'] is not None and a['logprob'] > -1e30]
print(all(a['token'] in ('a', 'b', 'c') for a in alts) and abs(sum(math.exp(a['logprob']) for a in alts) - 1) < 1e-4 and e['token'] in ('a', 'b', 'c'))" "$tmp/lp.json" 2>&1)" = True ]

# ---- batch invariance: tokens and logprob bits alone and batched ----
S=$(python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))" "$tmp/s.json")
REQ="{\"prompt\":\"Once upon a time\",\"json_schema\":$S,\"temperature\":1,\"seed\":5,\"max_tokens\":200,\"logprobs\":3,\"return_tokens\":true}"
post /v1/completions "$REQ" "$tmp/alone.json" >/dev/null
others=()
for i in 1 2 3; do
    post /v1/completions "{\"prompt\":\"Once upon a time there\",\"json_schema\":$S,\"temperature\":1,\"seed\":$((20+i)),\"max_tokens\":200}" "$tmp/other$i.json" >/dev/null &
    others+=($!)
done
post /v1/completions '{"prompt":"Once","temperature":1,"seed":9,"max_tokens":100}' "$tmp/other4.json" >/dev/null &
others+=($!)
post /v1/completions "$REQ" "$tmp/batched.json" >/dev/null
wait "${others[@]}"
check "a constrained request's tokens and logprobs are the same bits alone and batched with 4 others" [ "$(jv "$tmp/alone.json" "[d['choices'][0]['tokens'], d['choices'][0]['logprobs']]")" = "$(jv "$tmp/batched.json" "[d['choices'][0]['tokens'], d['choices'][0]['logprobs']]")" -a "$(jv "$tmp/alone.json" "len(d['choices'][0]['tokens']) > 5")" = true ]

# ---- bad input: 400 naming the field, the place and the reason ----
post /v1/completions '{"prompt":"x","grammar":"root ::= (\"a\" | \"b\"\n"}' "$tmp/e1.json" >"$tmp/code"
check "an unbalanced grammar is a 400 naming grammar, line and column" [ "$(cat "$tmp/code")" = 400 -a "$(jv "$tmp/e1.json" "[d['error']['param'], d['error']['message'].startswith('grammar:1:10: unbalanced')]")" = '["grammar", true]' ]
post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"json_schema":{"type":"object","properties":{"a":{"type":"string","pattern":"(?=x)a"}}}}' "$tmp/e2.json" >"$tmp/code"
check "a regex outside the subset is a 400 naming json_schema and the path" [ "$(cat "$tmp/code")" = 400 -a "$(jv "$tmp/e2.json" "[d['error']['param'], '#/properties/a' in d['error']['message']]")" = '["json_schema", true]' ]
post /v1/completions '{"prompt":"x","json_schema":{"type":"string","maxLength":5000,"pattern":"^[a-z]+$"}}' "$tmp/e3.json" >"$tmp/code"
check "maxLength 5000 beside a pattern (llama.cpp #25746) is a 400 at once, naming the keyword" [ "$(cat "$tmp/code")" = 400 -a "$(jv "$tmp/e3.json" "'maxLength' in d['error']['message'] or 'pattern' in d['error']['message']")" = true ]
post /v1/completions '{"prompt":"x","json_schema":{"type":"string"},"grammar":"root ::= \"a\""}' "$tmp/e4.json" >"$tmp/code"
check "two constraints at once are a 400" [ "$(cat "$tmp/code")" = 400 -a "$(jv "$tmp/e4.json" "d['error']['param']")" = '"grammar"' ]
post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required"}' "$tmp/e5.json" >"$tmp/code"
check "tool_choice required on a model without a tool-call template (ChatML) is a 400 naming tool_choice" [ "$(cat "$tmp/code")" = 400 -a "$(jv "$tmp/e5.json" "d['error']['param']")" = '"tool_choice"' ]
post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}' "$tmp/e6.json" >"$tmp/code"
check "a named function not in tools is a 400 naming tool_choice.function.name" [ "$(cat "$tmp/code")" = 400 -a "$(jv "$tmp/e6.json" "d['error']['param']")" = '"tool_choice.function.name"' ]
# ---- compiled grammars are shared: a request that constrains its output as an earlier one did reuses
# its compiled grammar (and mask caches), gives the same output, and 32 others push it out ----
gmet() { curl -s -m 10 "$URL/metrics" | awk -v k="caldrix_grammar_cache_$1_total" '$1 == k {print $2}'; }
h0=$(gmet hits); m0=$(gmet misses)
P='{"type":"object","properties":{"probe":{"type":"string","maxLength":7}},"required":["probe"]}'
post /v1/completions "{\"prompt\":\"Once\",\"json_schema\":$P,\"temperature\":1,\"seed\":5,\"max_tokens\":40}" "$tmp/c1.json" >/dev/null
check "a schema not seen before is compiled (grammar cache misses +1, hits +0)" [ "$(gmet misses)" = $((m0+1)) -a "$(gmet hits)" = "$h0" ]
post /v1/completions "{\"prompt\":\"Once\",\"json_schema\":$P,\"temperature\":1,\"seed\":5,\"max_tokens\":40}" "$tmp/c2.json" >/dev/null
check "the same schema again reuses it (hits +1)" [ "$(gmet hits)" = $((h0+1)) -a "$(gmet misses)" = $((m0+1)) ]
check "... and gives the same text for the same seed" [ "$(jv "$tmp/c1.json" "d['choices'][0]['text']")" = "$(jv "$tmp/c2.json" "d['choices'][0]['text']")" -a -n "$(jv "$tmp/c1.json" "d['choices'][0]['text']")" ]
post /v1/completions "{\"prompt\":\"Once\",\"grammar\":\"root ::= [ab]{1,3}\",\"max_tokens\":3}" "$tmp/c3.json" >/dev/null
post /v1/completions "{\"prompt\":\"Once\",\"json_schema\":{\"required\":[\"probe\"],\"properties\":{\"probe\":{\"maxLength\":7,\"type\":\"string\"}},\"type\":\"object\"},\"max_tokens\":3}" "$tmp/c4.json" >/dev/null
check "a GBNF grammar and the schema with its keys in another order are other grammars (misses +3 in all)" [ "$(gmet misses)" = $((m0+3)) ]
for i in $(seq 1 32); do
    post /v1/completions "{\"prompt\":\"Once\",\"json_schema\":{\"type\":\"string\",\"maxLength\":$i},\"max_tokens\":1}" "$tmp/cx.json" >/dev/null
done
post /v1/completions "{\"prompt\":\"Once\",\"json_schema\":$P,\"temperature\":1,\"seed\":5,\"max_tokens\":40}" "$tmp/c5.json" >/dev/null
check "after 32 other grammars the first was pushed out: compiled again (misses +36, hits +1 in all), same text" [ "$(gmet misses)" = $((m0+36)) -a "$(gmet hits)" = $((h0+1)) -a "$(jv "$tmp/c5.json" "d['choices'][0]['text']")" = "$(jv "$tmp/c1.json" "d['choices'][0]['text']")" ]

# ---- dead ends (issue 40 item 5) on a 7-token vocabulary that cannot spell "x" (tests/text/tiny_bpe_model.py):
# not complete there, a 400 grammar_dead_end (an error event once streaming) naming the byte and what the
# grammar wanted; complete there, finish_reason stop ----
python3 tests/text/tiny_bpe_model.py "$tmp/tiny" >/dev/null
URL0=$URL
if start_server tiny "$tmp/tiny" --threads 1; then
    post /v1/completions '{"prompt":"ab","grammar":"root ::= \"ab\" \"x\"","temperature":1,"seed":1,"max_tokens":20}' "$tmp/d1.json" >"$tmp/code"
    check "a dead end where the grammar is incomplete: 400 grammar_dead_end, param grammar, naming byte 2 and the byte wanted" [ "$(cat "$tmp/code")" = 400 -a "$(jv "$tmp/d1.json" "[d['error']['code'], d['error']['param'], 'dead end at byte 2 of the output' in d['error']['message'] and 'must be \'x\'' in d['error']['message']]")" = '["grammar_dead_end", "grammar", true]' ]
    post /v1/completions '{"prompt":"ab","grammar":"root ::= \"ab\" \"x\"","temperature":1,"seed":1,"max_tokens":20,"stream":true}' "$tmp/d2.sse" >/dev/null
    sse "$tmp/d2.sse" >"$tmp/d2.json"
    check "... streamed: the text so far, then an error event naming the position" [ "$(jv "$tmp/d2.json" "[''.join(c['choices'][0]['text'] for c in d if isinstance(c, dict) and c.get('choices')), [c['error']['code'] for c in d if isinstance(c, dict) and 'error' in c], any('dead end at byte 2' in c['error']['message'] for c in d if isinstance(c, dict) and 'error' in c)]")" = '["ab", ["grammar_dead_end"], true]' ]
    post /v1/completions '{"prompt":"ab","grammar":"root ::= \"ab\" | \"ab\" \"x\"","temperature":1,"seed":1,"max_tokens":20}' "$tmp/d3.json" >"$tmp/code"
    check "a dead end where the grammar is complete: finish_reason stop" [ "$(cat "$tmp/code")" = 200 -a "$(jv "$tmp/d3.json" "[d['choices'][0]['text'], d['choices'][0]['finish_reason']]")" = '["ab", "stop"]' ]
else
    bad "the server on the 7-token model starts"
fi
URL=$URL0
[ "$fail" -eq 0 ] || { echo "--- the server's log:"; tail -20 "$tmp/bundled.log"; }
stop_servers
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
