#!/usr/bin/env bash
# caldrix serve end to end, on 127.0.0.1 only: routes, greedy output equal to `caldrix run` token for
# token, streamed text equal to non-streamed, stop strings, seeds, logprobs, the prefix cache's
# cached_tokens, errors, API keys, 429; the official openai npm client (pinned in package.json,
# installed from the npm registry into tests/server/node_modules; no registry: the test fails);
# a chat model with a template (tests/cli/make_qwen3_chat_model.sh).
# isa-neutral: routes and the API's semantics; that a batched request's bits equal run's is test_engine's check, on every kernel set
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
S260=../shared/models/stories260K/stories260K.gguf

start_server bundled --threads 1 || { bad "the server starts on the bundled model"; echo "$pass passed, $fail failed"; exit 1; }
ok "the server starts on the bundled model and /health says 200"

# ---- routes ----
curl -s -m 5 "$URL/v1/health" -o "$tmp/h.json" -w '%{http_code}' >"$tmp/code"
check "/v1/health is 200 {status: ok}" [ "$(cat "$tmp/code")" = 200 -a "$(jv "$tmp/h.json" "d['status']")" = '"ok"' ]
curl -s -m 5 "$URL/v1/models" -o "$tmp/m.json"
check "/v1/models lists the model with caldrix's fields" [ "$(jv "$tmp/m.json" "[d['object'], d['data'][0]['id'], d['data'][0]['object'], d['data'][0]['owned_by'], d['data'][0]['compatibility'], d['data'][0]['chat_template'], d['data'][0]['context_length'] > 0]")" = '["list", "stories260K", "model", "caldrix", "compatible", false, true]' ]

# ---- greedy equals caldrix run, token for token ----
IDS=1,403,407,261,378,267,300
"$CALDRIX" run "$S260" --prompt-ids $IDS -n 24 --temp 0 --json >"$tmp/run.json" 2>/dev/null
post /v1/completions "{\"prompt\":[${IDS}],\"max_tokens\":24,\"temperature\":0,\"return_tokens\":true}" "$tmp/c.json" >"$tmp/code"
check "greedy /v1/completions equals caldrix run --temp 0 token for token" \
    [ "$(jv "$tmp/c.json" "d['choices'][0]['tokens']")" = "$(jv "$tmp/run.json" "d['tokens']")" -a "$(jv "$tmp/run.json" "len(d['tokens'])")" -gt 0 ]
check "... and its text equals run's text" [ "$(jv "$tmp/c.json" "d['choices'][0]['text']")" = "$(jv "$tmp/run.json" "d['text']")" ]
check "usage counts the prompt and the completion" [ "$(jv "$tmp/c.json" "[d['usage']['prompt_tokens'], d['usage']['completion_tokens'] == len(d['choices'][0]['tokens']), d['usage']['total_tokens'] == d['usage']['prompt_tokens'] + d['usage']['completion_tokens'], 'cached_tokens' in d['usage']['prompt_tokens_details'], d['object']]")" = '[7, true, true, true, "text_completion"]' ]

# ---- streamed text equals non-streamed ----
B='"prompt":"Once upon a time","max_tokens":40,"temperature":0'
post /v1/completions "{$B}" "$tmp/ns.json" >/dev/null
post /v1/completions "{$B,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" "$tmp/s.sse" >/dev/null
sse "$tmp/s.sse" >"$tmp/s.json"
check "a streamed completion's text equals the non-streamed one" [ "$(jv "$tmp/s.json" "''.join(c['choices'][0]['text'] for c in d[:-1] if c['choices'])")" = "$(jv "$tmp/ns.json" "d['choices'][0]['text']")" ]
check "the stream ends with finish_reason, a usage chunk, then [DONE]" [ "$(jv "$tmp/s.json" "[d[-1], d[-3]['choices'][0]['finish_reason'], d[-2]['choices'], d[-2]['usage']['completion_tokens']]")" = "[\"[DONE]\", \"length\", [], 40]" ]
CB='"messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":32,"temperature":0'
post /v1/chat/completions "{$CB}" "$tmp/cns.json" >/dev/null
post /v1/chat/completions "{$CB,\"stream\":true}" "$tmp/cs.sse" >/dev/null
sse "$tmp/cs.sse" >"$tmp/cs.json"
check "a streamed chat's text equals the non-streamed one" [ "$(jv "$tmp/cs.json" "''.join(c['choices'][0]['delta'].get('content','') for c in d[:-1])")" = "$(jv "$tmp/cns.json" "d['choices'][0]['message']['content']")" ]
check "chat chunks: role first, chat.completion.chunk, finish last, no usage unless asked" [ "$(jv "$tmp/cs.json" "[d[0]['choices'][0]['delta']['role'], d[0]['object'], d[-2]['choices'][0]['finish_reason'] is not None, all('usage' not in c for c in d[:-1])]")" = '["assistant", "chat.completion.chunk", true, true]' ]
check "chat without a template uses ChatML (the prompt counts its markers)" [ "$(jv "$tmp/cns.json" "d['usage']['prompt_tokens'] > 10 and d['object'] == 'chat.completion'")" = true ]

# ---- stop strings: cut before the stop, never emitted, streamed or not ----
full=$(jv "$tmp/ns.json" "d['choices'][0]['text']")
stop=$(python3 -c "import json,sys; t=json.loads(sys.argv[1]); print(json.dumps(t[12:16]))" "$full")
post /v1/completions "{$B,\"stop\":[$stop]}" "$tmp/st.json" >/dev/null
post /v1/completions "{$B,\"stop\":$stop,\"stream\":true}" "$tmp/st.sse" >/dev/null
sse "$tmp/st.sse" >"$tmp/sts.json"
want=$(python3 -c "import json,sys; t=json.loads(sys.argv[1]); s=json.loads(sys.argv[2]); print(json.dumps(t[:t.find(s)]))" "$full" "$stop")
check "a stop string ends the text before it (finish_reason stop)" [ "$(jv "$tmp/st.json" "[d['choices'][0]['text'], d['choices'][0]['finish_reason']]")" = "[$want, \"stop\"]" ]
check "... and streamed, the same text" [ "$(jv "$tmp/sts.json" "''.join(c['choices'][0]['text'] for c in d[:-1])")" = "$want" ]

# ---- seeds ----
post /v1/completions '{"prompt":"Once upon a time","max_tokens":24,"temperature":1,"seed":1234}' "$tmp/r1.json" >/dev/null
post /v1/completions '{"prompt":"Once upon a time","max_tokens":24,"temperature":1,"seed":1234,"stream":true}' "$tmp/r2.sse" >/dev/null
sse "$tmp/r2.sse" >"$tmp/r2.json"
check "the same seed gives the same sample (streamed or not)" [ "$(jv "$tmp/r1.json" "d['choices'][0]['text']")" = "$(jv "$tmp/r2.json" "''.join(c['choices'][0]['text'] for c in d[:-1])")" ]
seen=""
for s in 1 2 3 4; do post /v1/completions "{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":1,\"seed\":$s}" "$tmp/rs$s.json" >/dev/null; seen="$seen$(jv "$tmp/rs$s.json" "d['choices'][0]['text']")"$'\n'; done
check "different seeds give different samples" [ "$(printf '%s' "$seen" | sort -u | wc -l)" -gt 1 ]

# ---- logprobs ----
post /v1/chat/completions "{$CB,\"logprobs\":true,\"top_logprobs\":3}" "$tmp/lp.json" >/dev/null
check "chat logprobs: one entry per token, 3 alternatives, the best first" [ "$(jv "$tmp/lp.json" "[len(d['choices'][0]['logprobs']['content']) == d['usage']['completion_tokens'], all(len(e['top_logprobs']) == 3 and e['logprob'] <= 0 and e['top_logprobs'][0]['logprob'] >= e['logprob'] - 1e-6 and isinstance(e['bytes'], list) for e in d['choices'][0]['logprobs']['content'])]")" = '[true, true]' ]
check "greedy chat tokens are the top alternative" [ "$(jv "$tmp/lp.json" "all(e['top_logprobs'][0]['token'] == e['token'] for e in d['choices'][0]['logprobs']['content'])")" = true ]
post /v1/completions "{$B,\"logprobs\":2}" "$tmp/clp.json" >/dev/null
check "completions logprobs: tokens, token_logprobs, top_logprobs, text_offset" [ "$(jv "$tmp/clp.json" "[len(d['choices'][0]['logprobs'][k]) for k in ('tokens','token_logprobs','top_logprobs','text_offset')] == [40]*4 and ''.join(d['choices'][0]['logprobs']['tokens']) == d['choices'][0]['text']")" = true ]

# ---- logit_bias: +100 on one token makes greedy choose it every time; -100 on the greedy first token removes it ----
post /v1/completions '{"prompt":"Once upon a time","max_tokens":6,"temperature":0,"return_tokens":true,"logit_bias":{"300":100}}' "$tmp/lb.json" >/dev/null
check "logit_bias +100 on token 300: every greedy token is 300" [ "$(jv "$tmp/lb.json" "d['choices'][0]['tokens']")" = '[300, 300, 300, 300, 300, 300]' ]
post /v1/completions '{"prompt":"Once upon a time","max_tokens":1,"temperature":0,"return_tokens":true}' "$tmp/lb0.json" >/dev/null
first=$(jv "$tmp/lb0.json" "d['choices'][0]['tokens'][0]")
post /v1/completions "{\"prompt\":\"Once upon a time\",\"max_tokens\":1,\"temperature\":0,\"return_tokens\":true,\"logit_bias\":{\"$first\":-100}}" "$tmp/lb1.json" >/dev/null
check "logit_bias -100 on the greedy first token ($first) makes it another" [ -n "$first" -a "$(jv "$tmp/lb1.json" "d['choices'][0]['tokens'][0] != $first")" = true ]

# ---- batch invariance end to end: 8 concurrent requests give exactly what each gives alone ----
# (tokens and logprobs compared as the server prints them: 17 significant digits, every float bit)
PROMPTS=("Once upon a time" "The cat" "Lily and Ben went to the park to play with a big red ball" "One day" \
         "Tom had a little dog named Spot who liked to run" "The sun was hot" "A bird sang" "Mom said")
for i in "${!PROMPTS[@]}"; do
    post /v1/completions "{\"prompt\":\"${PROMPTS[$i]}\",\"max_tokens\":$((12 + 3 * i)),\"temperature\":0,\"logprobs\":5,\"return_tokens\":true}" "$tmp/alone$i.json" >/dev/null
done
BI=()
for i in "${!PROMPTS[@]}"; do
    post /v1/completions "{\"prompt\":\"${PROMPTS[$i]}\",\"max_tokens\":$((12 + 3 * i)),\"temperature\":0,\"logprobs\":5,\"return_tokens\":true}" "$tmp/batch$i.json" >/dev/null &
    BI+=($!)
done
wait "${BI[@]}"
same=0
for i in "${!PROMPTS[@]}"; do
    a=$(jv "$tmp/alone$i.json" "[d['choices'][0]['tokens'], d['choices'][0]['logprobs']]")
    [ -n "$a" ] && [ "$(jv "$tmp/alone$i.json" "len(d['choices'][0]['tokens'])")" -gt 0 ] && [ "$a" = "$(jv "$tmp/batch$i.json" "[d['choices'][0]['tokens'], d['choices'][0]['logprobs']]")" ] && same=$((same+1))
done
check "8 different prompts at once: tokens and top-5 logprobs bit-identical to each alone ($same of 8)" [ $same = 8 ]
BI=()
for i in $(seq 8); do
    post /v1/chat/completions "{$CB,\"logprobs\":true,\"top_logprobs\":5}" "$tmp/cb$i.json" >/dev/null &
    BI+=($!)
done
wait "${BI[@]}"
post /v1/chat/completions "{$CB,\"logprobs\":true,\"top_logprobs\":5}" "$tmp/cb0.json" >/dev/null
same=0
for i in $(seq 8); do
    [ "$(jv "$tmp/cb$i.json" "d['choices'][0]['logprobs']")" = "$(jv "$tmp/cb0.json" "d['choices'][0]['logprobs']")" ] && [ "$(jv "$tmp/cb0.json" "len(d['choices'][0]['logprobs']['content'])")" -gt 0 ] && same=$((same+1))
done
check "8 identical greedy chats at once: tokens and logprobs bit-identical to one alone ($same of 8)" [ $same = 8 ]

# ---- the prefix cache: a repeated prompt's blocks come from the cache ----
LONG='"prompt":"Once upon a time there was a little girl named Lily who loved to play in the park with her dog and her friends every day after school","max_tokens":4,"temperature":0'
post /v1/completions "{$LONG}" "$tmp/p1.json" >/dev/null
post /v1/completions "{$LONG}" "$tmp/p2.json" >/dev/null
check "a repeated prompt reports cached_tokens (whole 16-token blocks)" [ "$(jv "$tmp/p2.json" "d['usage']['prompt_tokens_details']['cached_tokens'] >= 16 and d['usage']['prompt_tokens_details']['cached_tokens'] % 16 == 0 and d['choices'][0]['text'] == '$(jv "$tmp/p1.json" "d['choices'][0]['text']" | tr -d '"')'")" = true ]

# ---- the prefix store survives a restart (--kv-store), in f16 too ----
for kt in f32 f16; do
    start_server "store-$kt" --kv-store "$tmp/store-$kt" --kv-type $kt || bad "serve --kv-store --kv-type $kt starts"
    post /v1/completions "{$LONG}" "$tmp/s1-$kt.json" >/dev/null
    stop_servers
    start_server "store2-$kt" --kv-store "$tmp/store-$kt" --kv-type $kt || bad "serve restarts on its store"
    post /v1/completions "{$LONG}" "$tmp/s2-$kt.json" >/dev/null
    stop_servers
    check "after a restart with --kv-store (kv $kt) the prompt's blocks come from the store, same answer" [ "$(jv "$tmp/s2-$kt.json" "d['usage']['prompt_tokens_details']['cached_tokens'] >= 16 and d['choices'][0]['text'] == '$(jv "$tmp/s1-$kt.json" "d['choices'][0]['text']" | tr -d '"')' and '$(jv "$tmp/s1-$kt.json" "d['usage']['prompt_tokens_details']['cached_tokens']")' == '0'")" = true ]
done
start_server bundled2 --threads 1 || { bad "the server starts again"; echo "$pass passed, $fail failed"; exit 1; }

# ---- tokenize / detokenize ----
post /tokenize '{"content":"Once upon a time"}' "$tmp/t.json" >/dev/null
post /tokenize '{"content":"Once upon a time","add_special":true}' "$tmp/t2.json" >/dev/null
check "/tokenize adds no BOS unless add_special" [ "$(jv "$tmp/t2.json" "d['tokens']")" = "$(jv "$tmp/t.json" "[1] + d['tokens']")" ]
post /detokenize "{\"tokens\":$(jv "$tmp/t.json" "d['tokens']")}" "$tmp/d.json" >/dev/null
check "/detokenize inverts /tokenize" [ "$(jv "$tmp/d.json" "d['content']")" = '"Once upon a time"' ]

# ---- errors ----
e() { # e NAME WANT_STATUS WANT_CODE_OR_PARAM PATH BODY [curl args]
    local name=$1 want=$2 what=$3 path=$4 body=$5; shift 5
    local got; got=$(post "$path" "$body" "$tmp/e.json" "$@")
    local shape; shape=$(jv "$tmp/e.json" "sorted(d['error'].keys()) == ['code','message','param','type'] and '$what' in (d['error']['code'], d['error']['param'])")
    check "$name: $want $what" [ "$got" = "$want" -a "$shape" = true ]
}
e "bad JSON" 400 invalid_json /v1/chat/completions '{"messages":'
e "n=0 refused by name" 400 n /v1/chat/completions "{$CB,\"n\":0}"
e "temperature as a string" 400 temperature /v1/completions '{"prompt":"x","temperature":"hot"}'
e "a token id outside the vocabulary" 400 'prompt[1]' /v1/completions '{"prompt":[1,999999]}'
# max_tokens past the context is cut to it (as llama-server and vLLM do); only a prompt that does not fit is refused
CTX=$(curl -s -m 5 "$URL/v1/models" | python3 -c "import json,sys; print(json.load(sys.stdin)['data'][0]['context_length'])")
code=$(post /v1/completions '{"prompt":"Once","max_tokens":100000000,"ignore_eos":true,"temperature":0}' "$tmp/mt.json")
check "max_tokens 1e8 on a $CTX context: 200, generated to the full context, finish_reason length" \
    [ "$code" = 200 -a "$(jv "$tmp/mt.json" "[d['usage']['prompt_tokens'] + d['usage']['completion_tokens'], d['choices'][0]['finish_reason']]")" = "[$CTX, \"length\"]" ]
code=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":100000000,"max_tokens":null,"ignore_eos":true,"temperature":0,"stream":true}' "$tmp/mt.sse")
check "... chat, streamed: the same clamp, finish_reason length, [DONE]" \
    [ "$code" = 200 -a "$(sse "$tmp/mt.sse" | python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps([d[-2]['choices'][0]['finish_reason'], d[-1]]))")" = '["length", "[DONE]"]' ]
LONGIDS=$(python3 -c "print(','.join(['300']*$CTX))")
e "a prompt of the whole context (ids)" 400 prompt /v1/completions "{\"prompt\":[$LONGIDS],\"max_tokens\":1}"
LONGCHAT=$(python3 -c "print('Once upon a time ' * $CTX)")
e "a chat prompt past the context" 400 messages /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"$LONGCHAT\"}]}"
e "invalid UTF-8" 400 content /v1/chat/completions "$(printf '{"messages":[{"role":"user","content":"\xff\xfe"}]}')"
e "unknown route" 404 not_found /v1/nothing '{}'
code=$(curl -s -m 5 -o "$tmp/e.json" -w '%{http_code}' "$URL/v1/chat/completions")
check "GET on a POST route is 405" [ "$code" = 405 ]
head -c $((9 << 20)) /dev/zero | tr '\0' ' ' >"$tmp/big"
code=$(curl -s -m 30 -o "$tmp/e.json" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$tmp/big" "$URL/v1/completions")
check "a 9 MiB body is 413" [ "$code" = 413 ]
code=$(curl -s -m 30 -o "$tmp/e.json" -w '%{http_code}' -H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' --data-binary @"$tmp/big" "$URL/v1/completions")
check "a 9 MiB chunked body is 413" [ "$code" = 413 ]

# ---- the openai npm client, pinned ----
if (cd tests/server && { [ -f node_modules/openai/package.json ] && [ "$(node -p "require('./node_modules/openai/package.json').version")" = "$(node -p "require('./package.json').dependencies.openai")" ] || timeout 300 npm install --no-audit --no-fund --no-package-lock >"$tmp/npm.log" 2>&1; }); then
    if timeout 120 node tests/server/client.mjs "$URL/v1" none stories260K >"$tmp/node.json" 2>"$tmp/node.err"; then
        check "openai client: chat, streamed chat, completions agree with themselves" [ "$(jv "$tmp/node.json" "[d['chat_text'] == d['chat_stream_text'] and len(d['chat_text']) > 0, d['chat_stream_roles'], d['chat_finish'] == d['chat_stream_finish'], [d['chat_usage'][k] for k in ('prompt_tokens', 'completion_tokens', 'total_tokens')] == [d['chat_stream_usage'][k] for k in ('prompt_tokens', 'completion_tokens', 'total_tokens')], d['cmpl_text'] == d['cmpl_stream_text'], d['seed_same'], d['models'][0]['id']]")" = '[true, ["assistant"], true, true, true, true, "stories260K"]' ]
        check "openai client: n=2 gives choices 0 and 1, alike at temperature 0, streamed as not; best_of 3 is a 400 on best_of" [ "$(jv "$tmp/node.json" "[d['n2']['indexes'], d['n2']['texts'][0] == d['n2']['texts'][1] and len(d['n2']['texts'][0]) > 0, d['n2']['stream_texts'] == d['n2']['texts'], d['best_of3']]")" = '[[0, 1], true, true, {"status": 400, "param": "best_of"}]' ]
        check "openai client: greedy chat equals curl's" [ "$(jv "$tmp/node.json" "d['chat_text'][:10]")" = "$(curl -s -m 30 -H 'Content-Type: application/json' -d '{"model":"x","messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":24,"temperature":0}' "$URL/v1/chat/completions" | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)['choices'][0]['message']['content'][:10]))")" ]
    else
        bad "openai client ran"; cat "$tmp/node.err"
    fi
else
    bad "npm installs the pinned openai client (registry unreachable?)"; cat "$tmp/npm.log"
fi
stop_servers

# ---- API key, busy ----
start_server keyed --threads 1 --api-key s3cret --max-batch 1 --max-queue 1 || bad "the keyed server starts"
check "with --api-key, /health needs no key" [ "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$URL/health")" = 200 ]
e "no key" 401 invalid_api_key /v1/completions '{"prompt":"x"}'
check "... and says it needs a key" grep -q 'needs an API key' "$tmp/e.json"
e "a wrong key" 401 invalid_api_key /v1/completions '{"prompt":"x"}' -H 'Authorization: Bearer s3cre'
check "... and says the key is wrong" grep -q '"wrong API key"' "$tmp/e.json"
e "Bearer with no key" 401 invalid_api_key /v1/completions '{"prompt":"x"}' -H 'Authorization: Bearer'
check "... is a wrong key too" grep -q '"wrong API key"' "$tmp/e.json"
e "another scheme" 401 invalid_api_key /v1/completions '{"prompt":"x"}' -H 'Authorization: Basic czNjcmV0'
check "... says Bearer is expected" grep -q 'must be \\"Bearer KEY\\"' "$tmp/e.json"
check "the right key works" [ "$(post /v1/completions '{"prompt":"x","max_tokens":2}' "$tmp/k.json" -H 'Authorization: Bearer s3cret')" = 200 ]
check "the scheme is case-insensitive (bearer, BEARER)" [ "$(post /v1/completions '{"prompt":"x","max_tokens":2}' "$tmp/k.json" -H 'Authorization: bearer s3cret')$(post /v1/completions '{"prompt":"x","max_tokens":2}' "$tmp/k.json" -H 'Authorization: BEARER s3cret')" = 200200 ]
e "an unknown route without the key: 401, not 404" 401 invalid_api_key /v1/nothing '{}'
e "an unknown route with the key: 404" 404 not_found /v1/nothing '{}' -H 'Authorization: Bearer s3cret'
check "/metrics needs the key too" [ "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$URL/metrics")" = 401 ]
# six at once on one slot and a queue of one: two run, the others are refused
BUSY=()
for i in 1 2 3 4 5 6; do
    curl -s -m 180 -D "$tmp/hdr$i" -o "$tmp/busy$i.json" -w '%{http_code}' -H 'Authorization: Bearer s3cret' -H 'Content-Type: application/json' \
        -d '{"prompt":"Once","max_tokens":1900,"ignore_eos":true}' "$URL/v1/completions" >"$tmp/busy$i.code" &
    BUSY+=($!)
done
wait "${BUSY[@]}"
n200=0; n429=0; ra=0
for i in 1 2 3 4 5 6; do
    case "$(cat "$tmp/busy$i.code")" in
        200) n200=$((n200+1)) ;;
        429) n429=$((n429+1)); grep -qi '^retry-after:' "$tmp/hdr$i" && [ "$(jv "$tmp/busy$i.json" "d['error']['code']")" = '"MODEL_RESOURCE_BUSY"' ] && ra=$((ra+1)) ;;
    esac
done
check "a full queue is 429 MODEL_RESOURCE_BUSY with Retry-After ($n200 ran, $n429 refused)" [ $n200 -ge 1 -a $n429 -ge 1 -a $ra = $n429 -a $((n200+n429)) = 6 ]
stop_servers

# ---- a model with a chat template ----
HF=../shared/fixtures/hf; TK=../shared/fixtures/tokenizers
source tests/cli/make_qwen3_chat_model.sh
D=$tmp/qwen3chat
make_qwen3_chat_model "$D"
# room for Qwen3's tools preamble (~390 tokens): the random weights do not care where RoPE ends
python3 -c "import json,sys; p=sys.argv[1]+'/config.json'; c=json.load(open(p)); c['max_position_embeddings']=1024; json.dump(c,open(p,'w'))" "$D"
if start_server qwen --threads 1 "$D"; then
    curl -s -m 5 "$URL/v1/models" -o "$tmp/qm.json"
    check "/v1/models: the chat model says chat_template true" [ "$(jv "$tmp/qm.json" "[d['data'][0]['id'], d['data'][0]['chat_template']]")" = '["qwen3chat", true]' ]
    "$CALDRIX" run "$D" --chat -p 'Hello!' -n 8 --temp 0 --json >"$tmp/qrun.json" 2>/dev/null
    post /v1/chat/completions '{"messages":[{"role":"user","content":"Hello!"}],"max_tokens":8,"temperature":0,"return_tokens":true}' "$tmp/qc.json" >/dev/null
    check "chat through the template equals caldrix run --chat (prompt length and tokens)" [ "$(jv "$tmp/qc.json" "[d['usage']['prompt_tokens'], d['choices'][0]['tokens']]")" = "$(jv "$tmp/qrun.json" "[len(d['prompt']), d['tokens']]")" ]
    post /v1/chat/completions '{"messages":[{"role":"user","content":"Hello!"}],"max_tokens":8,"temperature":0,"stream":true}' "$tmp/qs.sse" >/dev/null
    sse "$tmp/qs.sse" >"$tmp/qs.json"
    check "the chat model's streamed text equals the non-streamed" [ "$(jv "$tmp/qs.json" "''.join(c['choices'][0]['delta'].get('content','') for c in d[:-1])")" = "$(jv "$tmp/qc.json" "d['choices'][0]['message']['content']")" ]
    post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"function","function":{"name":"get_time","description":"the time","parameters":{"type":"object","properties":{}}}}],"max_tokens":2,"temperature":0}' "$tmp/qt.json" >/dev/null
    check "tools reach the template (a longer prompt, or a refusal that counts it)" [ "$(jv "$tmp/qt.json" "('usage' in d and d['usage']['prompt_tokens'] > 30) or (d['error']['code'] == 'MODEL_RESOURCE_LIMIT' and int(__import__('re').search(r'(\\d+) prompt', d['error']['message']).group(1)) > 30)")" = true ]
    TB='"messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}],"max_tokens":12,"temperature":0'
    post /v1/chat/completions "{$TB}" "$tmp/qt1.json" >/dev/null
    post /v1/chat/completions "{$TB,\"stream\":true}" "$tmp/qt2.sse" >/dev/null
    sse "$tmp/qt2.sse" >"$tmp/qt2.json"
    check "with tools, a reply that calls none is content, streamed (held, then released) as whole" [ "$(jv "$tmp/qt1.json" "len(d['choices'][0]['message']['content']) > 0")" = true -a "$(jv "$tmp/qt1.json" "[d['choices'][0]['message']['content'], 'tool_calls' in d['choices'][0]['message'], d['choices'][0]['finish_reason']]")" = "$(jv "$tmp/qt2.json" "[''.join(c['choices'][0]['delta'].get('content','') for c in d[:-1]), any('tool_calls' in c['choices'][0]['delta'] for c in d[:-1]), d[-2]['choices'][0]['finish_reason']]")" ]
    [ "$fail" -eq 0 ] || { echo "--- the chat server's log:"; tail -40 "$tmp/qwen.log"; }
else
    bad "the server starts on the qwen3 chat fixture"
fi
stop_servers
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
