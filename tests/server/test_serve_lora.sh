#!/usr/bin/env bash
# serve --lora: per-request LoRA adapters (llama-server's "lora": [{"id", "scale"}], the NAME as id
# too), GET/POST /lora-adapters, and the refusals. The oracle of every generation is its own single
# `caldrix run --lora ...` (tokens and text bit for bit); the token-exactness of an adapter against
# PyTorch is tested in tests/model and tests/train. The adapters are the PEFT fixtures on the llama
# fixture (../shared/fixtures/train: lora_llama after 30 steps with weight decay 0 and 0.01, and the
# distillation's student adapter), and for text (chat, completions) random ones made for stories260K
# by tests/server/make_lora.py. 8 requests at once over 3 adapters and none, greedy and seeded, each
# equal to its run, and its logprobs equal (bit for bit) to the same request served alone: a row's
# result does not depend on the rows beside it in the batch.
# isa-neutral: adapters chosen per request over HTTP; that a row's bits beside other adapters equal its own run is test_lora's check, which every kernel set runs
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
M=../shared/fixtures/hf/llama
T=../shared/fixtures/train
A0=$T/lora_llama/adapter_step30 A1=$T/lora_llama/wd0.01/adapter_step30 A2=$T/distill/adapter_step20
S260=../shared/models/stories260K/stories260K.gguf

run_json() { "$CALDRIX" run "$@" --threads 1 --json 2>"$tmp/run.err"; }

# ---- the oracle: single runs ----
P1=231,154,88 P2=123,108,21,71,206,240,298,143
SEEDED="--temp 0.9 --top-k 40 --top-p 0.95 --min-p 0.05"
SEEDED_J='"temperature":0.9,"top_k":40,"top_p":0.95,"min_p":0.05'
# case: prompt, sampling (g: greedy, sN: seed N), adapters for run, "lora" for the request
CASES=(
  "$P1|g||"
  "$P2|g|--lora $A0|[{\"id\":0,\"scale\":1}]"
  "$P1|g|--lora $A1|[{\"id\":1,\"scale\":1}]"
  "$P2|g|--lora $A2:0.5|[{\"id\":\"distill\",\"scale\":0.5}]"
  "$P2|s7||"
  "$P1|s11|--lora $A0|[{\"id\":\"final\",\"scale\":1}]"
  "$P2|s5|--lora $A1:1.5|[{\"id\":1,\"scale\":1.5}]"
  "$P1|s3|--lora $A0:0.5 --lora $A2|[{\"id\":0,\"scale\":0.5},{\"id\":2,\"scale\":1}]"
)
i=0
for c in "${CASES[@]}"; do
    IFS='|' read -r ids smp lr lj <<<"$c"
    sa="--temp 0"; [ "$smp" != g ] && sa="$SEEDED --seed ${smp#s}"
    # shellcheck disable=SC2086
    run_json $M --dtype f32 --prompt-ids $ids -n 16 $sa $lr --ignore-eos >"$tmp/run$i.json" || { cat "$tmp/run.err"; }
    i=$((i+1))
done
check "the single runs give 16 tokens each" [ "$(for k in 0 1 2 3 4 5 6 7; do jv "$tmp/run$k.json" "len(d['tokens'])"; done | sort -u)" = 16 ]
check "an adapter changes the output (greedy on P1: no adapter vs A1; so the oracle can fail)" \
    [ "$(jv "$tmp/run0.json" "d['tokens']")" != "$(jv "$tmp/run2.json" "d['tokens']")" ]
"$CALDRIX" run $M --dtype f32 --prompt-ids $P2 -n 16 --temp 0 --ignore-eos --threads 1 --json >"$tmp/base2.json" 2>/dev/null
check "greedy on P2: A0 and no adapter differ" [ "$(jv "$tmp/base2.json" "d['tokens']")" != "$(jv "$tmp/run1.json" "d['tokens']")" ]

start_server lora $M --dtype f32 --threads 2 --max-batch 8 --lora final=$A0 --lora wd=$A1 --lora distill=$A2 \
    || { bad "the server starts with three adapters"; echo "$pass passed, $fail failed"; exit 1; }
ok "the server starts with three adapters"
check "stderr lists the adapters with their ids" grep -q 'LoRA adapter 2 "distill"' "$tmp/lora.log"

# ---- /lora-adapters ----
curl -s -m 10 "$URL/lora-adapters" -o "$tmp/la.json"
check "GET /lora-adapters: [{id, name, path, scale}] in --lora order, default scale 1" \
    [ "$(jv "$tmp/la.json" "[(x['id'], x['name'], x['path'], x['scale']) for x in d]")" = "$(python3 -c "import json;print(json.dumps([(0,'final','$A0',1.0),(1,'wd','$A1',1.0),(2,'distill','$A2',1.0)]))")" ]
curl -s -m 10 "$URL/v1/models" -o "$tmp/models.json"
check "/v1/models lists the model's adapters" [ "$(jv "$tmp/models.json" "[x['name'] for x in d['data'][0]['lora_adapters']]")" = '["final", "wd", "distill"]' ]
# a request without "lora" gets the defaults: every adapter at scale 1, in id order
run_json $M --dtype f32 --prompt-ids $P1 -n 16 --temp 0 --ignore-eos --lora $A0 --lora $A1 --lora $A2 >"$tmp/all.json"
post /v1/completions "{\"prompt\":[$P1],\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true,\"return_tokens\":true}" "$tmp/d.json" >"$tmp/code"
check "no \"lora\": the default scales (all three at 1), as run --lora x3" [ "$(cat "$tmp/code")" = 200 -a "$(jv "$tmp/d.json" "d['choices'][0]['tokens']")" = "$(jv "$tmp/all.json" "d['tokens']")" ]
check "POST /lora-adapters [{id 1, scale 0.7}] answers {success: true}" [ "$(post /lora-adapters '[{"id":1,"scale":0.7}]' "$tmp/p.json")" = 200 -a "$(jv "$tmp/p.json" "d")" = '{"success": true}' ]
curl -s -m 10 "$URL/lora-adapters" -o "$tmp/la2.json"
check "... the adapters not listed go to 0 (llama-server's rule)" [ "$(jv "$tmp/la2.json" "[round(x['scale'], 4) for x in d]")" = '[0.0, 0.7, 0.0]' ]
run_json $M --dtype f32 --prompt-ids $P1 -n 16 --temp 0 --ignore-eos --lora $A1:0.7 >"$tmp/w07.json"
post /v1/completions "{\"prompt\":[$P1],\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true,\"return_tokens\":true}" "$tmp/d2.json" >/dev/null
check "... and a request without \"lora\" then equals run --lora A1:0.7" [ "$(jv "$tmp/d2.json" "d['choices'][0]['tokens']")" = "$(jv "$tmp/w07.json" "d['tokens']")" ]
post /v1/completions "{\"prompt\":[$P1],\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true,\"return_tokens\":true,\"lora\":[]}" "$tmp/d3.json" >/dev/null
check "\"lora\": [] is the defaults too" [ "$(jv "$tmp/d3.json" "d['choices'][0]['tokens']")" = "$(jv "$tmp/w07.json" "d['tokens']")" ]
post /lora-adapters '[]' "$tmp/p.json" >/dev/null
curl -s -m 10 "$URL/lora-adapters" -o "$tmp/la3.json"
check "POST /lora-adapters [] turns every default off" [ "$(jv "$tmp/la3.json" "[x['scale'] for x in d]")" = '[0.0, 0.0, 0.0]' ]

# ---- 8 at once over 3 adapters and none ----
body() { # case index -> request body
    IFS='|' read -r ids smp lr lj <<<"${CASES[$1]}"
    local s="\"temperature\":0"
    [ "$smp" != g ] && s="$SEEDED_J,\"seed\":${smp#s}"
    local l=""; [ -n "$lj" ] && l=",\"lora\":$lj"
    printf '{"prompt":[%s],"max_tokens":16,"ignore_eos":true,"return_tokens":true,"logprobs":2,%s%s}' "$ids" "$s" "$l"
}
for k in 0 1 2 3 4 5 6 7; do
    post /v1/completions "$(body $k)" "$tmp/solo$k.json" >"$tmp/solo$k.code"
done
cpids=()
for k in 0 1 2 3 4 5 6 7; do
    post /v1/completions "$(body $k)" "$tmp/conc$k.json" >"$tmp/conc$k.code" &
    cpids+=($!)
done
wait "${cpids[@]}" # not the server
n_ok=0; n_lp=0; n_code=0
for k in 0 1 2 3 4 5 6 7; do
    [ "$(cat "$tmp/conc$k.code")$(cat "$tmp/solo$k.code")" = 200200 ] && n_code=$((n_code+1))
    [ "$(jv "$tmp/conc$k.json" "d['choices'][0]['tokens']")" = "$(jv "$tmp/run$k.json" "d['tokens']")" ] && n_ok=$((n_ok+1)) \
        || echo "# case $k: served $(jv "$tmp/conc$k.json" "d['choices'][0]['tokens']") run $(jv "$tmp/run$k.json" "d['tokens']")"
    [ "$(jv "$tmp/conc$k.json" "d['choices'][0]['logprobs']")" = "$(jv "$tmp/solo$k.json" "d['choices'][0]['logprobs']")" ] && n_lp=$((n_lp+1))
done
check "8 concurrent requests answer 200" [ $n_code = 8 ]
check "each of the 8 (3 adapters, 2 at once, and none; greedy and seeded) equals its single caldrix run --lora, token for token ($n_ok/8)" [ $n_ok = 8 ]
check "each one's logprobs in the batch equal the same request served alone, bit for bit ($n_lp/8)" [ $n_lp = 8 ]

# ---- errors ----
bad_req() { # name, lora JSON, expected text in the message
    local code; code=$(post /v1/completions "{\"prompt\":[$P1],\"max_tokens\":2,\"lora\":$2}" "$tmp/e.json")
    check "$1: 400 naming it" [ "$code" = 400 -a -n "$(jv "$tmp/e.json" "d['error']['message']" | grep -F -- "$3")" ]
}
bad_req "unknown id 3" '[{"id":3,"scale":1}]' 'lora[0].id is 3'
bad_req "negative id" '[{"id":-1,"scale":1}]' 'adapters are 0..2'
bad_req "unknown name" '[{"id":"nope","scale":1}]' 'no LoRA adapter has that name (this server has: final, wd, distill)'
bad_req "scale a string" '[{"id":0,"scale":"x"}]' 'lora[0].scale must be a number, not a string'
bad_req "an id of the wrong type" '[{"id":1.5,"scale":1}]' 'lora[0].id must be'
bad_req "lora not an array" '{"id":0}' 'lora must be an array'
bad_req "an entry not an object" '[0]' 'lora[0] must be an object'
code=$(post /lora-adapters '{"id":0,"scale":1}' "$tmp/e.json")
check "POST /lora-adapters with an object: 400 (Request body must be an array)" [ "$code" = 400 -a -n "$(jv "$tmp/e.json" "d['error']['message']" | grep -F 'must be an array')" ]
code=$(post /lora-adapters '[{"id":9,"scale":1}]' "$tmp/e.json")
check "POST /lora-adapters with an unknown id: 400" [ "$code" = 400 ]
code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -X DELETE "$URL/lora-adapters")
check "DELETE /lora-adapters: 405" [ "$code" = 405 ]
stop_servers

# ---- chat and completions text (stories260K, random adapters made for it) ----
python3 tests/server/make_lora.py "$tmp/s1" --layers 5 --hidden 64 --out q_proj=64,v_proj=32 --r 4 --seed 1 --b-scale 0.5
python3 tests/server/make_lora.py "$tmp/s2" --layers 5 --hidden 64 --out q_proj=64,v_proj=32 --r 8 --seed 2 --b-scale 0.5
start_server s260 "$S260" --threads 2 --lora one=$tmp/s1 --lora two=$tmp/s2:0.5 --lora-init-without-apply \
    || { bad "the server starts on stories260K with two made adapters"; echo "$pass passed, $fail failed"; exit 1; }
curl -s -m 10 "$URL/lora-adapters" -o "$tmp/sla.json"
check "--lora-init-without-apply: the default scales are 0" [ "$(jv "$tmp/sla.json" "[x['scale'] for x in d]")" = '[0.0, 0.0]' ]
IDS=1,403,407,261,378,267,300
run_json "$S260" --prompt-ids $IDS -n 24 --temp 0 >"$tmp/sr0.json"
run_json "$S260" --prompt-ids $IDS -n 24 --temp 0 --lora "$tmp/s1" >"$tmp/sr1.json"
run_json "$S260" --prompt-ids $IDS -n 24 --temp 0 --lora "$tmp/s2:0.5" >"$tmp/sr2.json"
post /v1/completions "{\"prompt\":[$IDS],\"max_tokens\":24,\"temperature\":0,\"return_tokens\":true}" "$tmp/sc0.json" >/dev/null
post /v1/completions "{\"prompt\":[$IDS],\"max_tokens\":24,\"temperature\":0,\"return_tokens\":true,\"lora\":[{\"id\":0,\"scale\":1}]}" "$tmp/sc1.json" >/dev/null
post /v1/completions "{\"prompt\":[$IDS],\"max_tokens\":24,\"temperature\":0,\"return_tokens\":true,\"lora\":[{\"id\":\"two\",\"scale\":0.5}]}" "$tmp/sc2.json" >/dev/null
for k in 0 1 2; do
    check "/v1/completions text, adapter case $k, equals caldrix run's" [ "$(jv "$tmp/sc$k.json" "d['choices'][0]['text']")" = "$(jv "$tmp/sr$k.json" "d['text']")" -a "$(jv "$tmp/sc$k.json" "d['choices'][0]['tokens']")" = "$(jv "$tmp/sr$k.json" "d['tokens']")" ]
done
check "the made adapters change stories260K's text" [ "$(jv "$tmp/sr0.json" "d['text']")" != "$(jv "$tmp/sr1.json" "d['text']")" ]
run_json "$S260" --chat -p "Tell me a story." -n 24 --temp 0 >"$tmp/cr0.json"
run_json "$S260" --chat -p "Tell me a story." -n 24 --temp 0 --lora "$tmp/s1" >"$tmp/cr1.json"
CB='"messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":24,"temperature":0,"return_tokens":true'
post /v1/chat/completions "{$CB}" "$tmp/cc0.json" >/dev/null
post /v1/chat/completions "{$CB,\"lora\":[{\"id\":0,\"scale\":1}]}" "$tmp/cc1.json" >/dev/null
post /v1/chat/completions "{$CB,\"stream\":true,\"lora\":[{\"id\":\"one\",\"scale\":1}]}" "$tmp/cs1.sse" >/dev/null
sse "$tmp/cs1.sse" >"$tmp/cs1.json"
for k in 0 1; do
    check "/v1/chat/completions, adapter case $k, equals caldrix run --chat's text" [ "$(jv "$tmp/cc$k.json" "d['choices'][0]['message']['content']")" = "$(jv "$tmp/cr$k.json" "d['text']")" ]
done
check "a streamed chat with \"lora\" equals the whole answer" [ "$(jv "$tmp/cs1.json" "''.join((c['choices'][0]['delta'].get('content') or '') for c in d[:-1] if c['choices'])")" = "$(jv "$tmp/cc1.json" "d['choices'][0]['message']['content']")" ]
check "chat: the adapter changes the text" [ "$(jv "$tmp/cc0.json" "d['choices'][0]['message']['content']")" != "$(jv "$tmp/cc1.json" "d['choices'][0]['message']['content']")" ]
stop_servers

# ---- a server without adapters; several models ----
start_server plain "$S260" --threads 1 || bad "a server without adapters starts"
code=$(post /v1/completions '{"prompt":[1,2],"max_tokens":2,"lora":[{"id":0,"scale":1}]}' "$tmp/e.json")
check "\"lora\" on a server without adapters: 400" [ "$code" = 400 -a -n "$(jv "$tmp/e.json" "d['error']['message']" | grep -F 'no LoRA adapters')" ]
check "... \"lora\": [] is fine there" [ "$(post /v1/completions '{"prompt":[1,2],"max_tokens":2,"lora":[]}' "$tmp/e.json")" = 200 ]
check "... GET /lora-adapters: []" [ "$(curl -s -m 10 "$URL/lora-adapters")" = "[]" ]
stop_servers
start_server multi --model "$M=llama" --model "$S260=s260" --dtype f32 --threads 1 --lora final=$A0 \
    || bad "several models: the first with an adapter"
run_json $M --dtype f32 --prompt-ids $P2 -n 16 --temp 0 --ignore-eos --lora $A0 >"$tmp/m0.json"
post /v1/completions "{\"model\":\"llama\",\"prompt\":[$P2],\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true,\"return_tokens\":true,\"lora\":[{\"id\":\"final\",\"scale\":1}]}" "$tmp/m1.json" >/dev/null
check "several models: the first model's adapter applies, as run's" [ "$(jv "$tmp/m1.json" "d['choices'][0]['tokens']")" = "$(jv "$tmp/m0.json" "d['tokens']")" ]
code=$(post /v1/completions '{"model":"s260","prompt":[1,2],"max_tokens":2,"lora":[{"id":0,"scale":1}]}' "$tmp/e.json")
check "\"lora\" on another model: 400 naming the adapters' model" [ "$code" = 400 -a -n "$(jv "$tmp/e.json" "d['error']['message']" | grep -F 'belong to model \"llama\"')" ]
curl -s -m 10 "$URL/v1/models" -o "$tmp/mm.json"
check "the adapters' model is pinned" [ "$(jv "$tmp/mm.json" "[x['pinned'] for x in d['data']]")" = '[true, false]' ]
stop_servers

# ---- bad --lora at startup: exit 2 before listening, naming the flag and the value ----
start_bad() { # name, expected text, serve args...
    local name=$1 want=$2; shift 2
    timeout 120 "$CALDRIX" serve "$@" --host 127.0.0.1 --port 0 >"$tmp/bad.log" 2>&1
    local rc=$?
    check "$name: exit 2 naming it" [ $rc = 2 -a -n "$(grep -F -- "$want" "$tmp/bad.log")" -a -z "$(grep 'listening on' "$tmp/bad.log")" ]
}
start_bad "an adapter for another model (qwen3's on llama)" "--lora q=$T/lora_qwen3_all/adapter_step20: " $M --dtype f32 --lora q=$T/lora_qwen3_all/adapter_step20
grep -q "layer\|maps\|targets" "$tmp/bad.log" && ok "... the message names the first mismatch" || { bad "... the message names the first mismatch"; cat "$tmp/bad.log"; }
start_bad "a missing folder" "--lora x=/nonexistent/adapter" $M --dtype f32 --lora x=/nonexistent/adapter
start_bad "a scale that is not finite" "--lora x=$A0:inf" $M --dtype f32 --lora x=$A0:inf
start_bad "two adapters of one name" 'another adapter is named "a"' $M --dtype f32 --lora a=$A0 --lora a=$A1
start_bad "an empty name" "the name is empty" $M --dtype f32 --lora =$A0
start_bad "several models: an adapter that does not fit the first" "--lora q=$T/lora_qwen3_all/adapter_step20" --model "$M=llama" --model "$S260=s260" --dtype f32 --lora q=$T/lora_qwen3_all/adapter_step20

echo "$pass passed, $fail failed"
[ $fail = 0 ]
