#!/usr/bin/env bash
# caldrix serve with several models (issue 37): the registry (--model, --models-dir, a request's
# "model"), three models at once under 12 concurrent clients with every answer from the model it
# named, --models-max 1 switching, the compatibility states and their 400 codes, the memory ledger's
# MODEL_RESOURCE_LIMIT and _BUSY, and bad options and faults. Expected tokens are each model's own
# single-model greedy output (`caldrix run --temp 0`): a consistency check of the routing (those
# outputs are checked against PyTorch and llama.cpp goldens by tests/cli and tests/server/test_serve.sh).
# isa-neutral: routing, compatibility states and the ledger; each model's expected tokens come from the same kernel set
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
S260=../shared/models/stories260K/stories260K.gguf
HF=../shared/fixtures/hf
fin() { echo "$pass passed, $fail failed"; exit $([ $fail = 0 ] && echo 0 || echo 1); }

# the three models: stories260K (GGUF), the llama fixture as a checkpoint, a GGUF twin of the qwen3 fixture
"$CALDRIX" convert $HF/qwen3 "$tmp/qwen3_twin.gguf" --type F32 2>"$tmp/conv.log" || { bad "convert qwen3"; cat "$tmp/conv.log"; fin; }
PROMPTS=("1,5,9" "1,20,30,40" "2,7" "1,100,101,102,103")
declare -A WANT
for m in s260 llama qwen; do
    case $m in s260) p=$S260 ;; llama) p=$HF/llama ;; qwen) p=$tmp/qwen3_twin.gguf ;; esac
    for i in 0 1 2 3; do
        "$CALDRIX" run "$p" --prompt-ids "${PROMPTS[$i]}" -n 12 --temp 0 --ignore-eos --json 2>/dev/null >"$tmp/run.json"
        WANT[$m.$i]=$(jv "$tmp/run.json" "d['tokens']")
    done
done
distinct=$(for i in 0 1 2 3; do [ "${WANT[s260.$i]}" != "${WANT[llama.$i]}" ] && [ "${WANT[llama.$i]}" != "${WANT[qwen.$i]}" ] && [ "${WANT[s260.$i]}" != "${WANT[qwen.$i]}" ] && echo y; done | wc -l)
check "the three models' greedy outputs differ for every prompt (a wrong-model answer is visible)" [ "$distinct" = 4 ]

# ---- three models at once, 200 requests from 12 clients ----
start_server three --threads 2 --model $S260=s260 --model $HF/llama=llama --model "$tmp/qwen3_twin.gguf=qwen" ||
    { bad "the server starts on three models"; fin; }
ok "the server starts on three models"
curl -s "$URL/v1/models" -o "$tmp/m.json"
check "/v1/models lists the three, unloaded, compatible, with tasks and context_length" \
    [ "$(jv "$tmp/m.json" "[(m['id'], m['state'], m['compatibility'], m['tasks'], m['context_length'] > 0) for m in d['data']]")" = \
      '[["s260", "unloaded", "compatible", ["generate"], true], ["llama", "unloaded", "compatible", ["generate"], true], ["qwen", "unloaded", "compatible", ["generate"], true]]' ]
WANTJ=$(for k in "${!WANT[@]}"; do echo "\"$k\": ${WANT[$k]},"; done)
python3 - "$URL" >"$tmp/mix.txt" <<PY
import json, random, sys, threading, urllib.request
from concurrent.futures import ThreadPoolExecutor
url = sys.argv[1]
want = { $WANTJ }
prompts = [[int(x) for x in p.split(',')] for p in "${PROMPTS[*]}".split()]
rnd = random.Random(37)
jobs = [(rnd.choice(['s260', 'llama', 'qwen']), rnd.randrange(4), rnd.random() < 0.3, rnd.random() < 0.5) for _ in range(200)]
def one(job):
    m, i, stream, chat_route = job
    body = {"model": m, "prompt": prompts[i], "max_tokens": 12, "temperature": 0, "ignore_eos": True, "return_tokens": True}
    if stream:
        body["stream"] = True
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        raw = r.read().decode()
    if stream:
        chunks = [json.loads(b[6:]) for b in raw.split("\n\n") if b.startswith("data: {")]
        model = {c["model"] for c in chunks}
        # a stream carries text only: compare it with the non-streamed text of the same model below
        return m, i, "stream", model, "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    d = json.loads(raw)
    return m, i, "whole", {d["model"]}, d["choices"][0]["tokens"]
with ThreadPoolExecutor(12) as ex:
    res = list(ex.map(one, jobs))
texts = {}
wrong = ok = 0
for m, i, kind, model, out in res:
    if model != {m}:
        wrong += 1
        continue
    if kind == "whole":
        if out == want[f"{m}.{i}"]:
            ok += 1
        else:
            wrong += 1
for m, i, kind, model, out in res:  # a stream's text equals the lone request's text for that model
    if kind == "stream" and model == {m}:
        body = {"model": m, "prompt": prompts[i], "max_tokens": 12, "temperature": 0, "ignore_eos": True}
        req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
        ref = json.loads(urllib.request.urlopen(req, timeout=60).read())["choices"][0]["text"]
        ok, wrong = (ok + 1, wrong) if out == ref else (ok, wrong + 1)
print(ok, wrong, sum(1 for j in jobs if j[2]))
PY
read n_ok n_wrong n_stream <"$tmp/mix.txt"
check "200 mixed requests from 12 clients: every answer from the model it named, bit for bit ($n_ok right, $n_wrong wrong, $n_stream streamed)" \
    [ "${n_ok:-0}" = 200 -a "${n_wrong:-1}" = 0 ]
# fairness: while s260 streams a long answer, a short request on qwen is answered at once (round-robin
# between the engines with work), not after it
curl -s -N -m 120 -H 'Content-Type: application/json' -d '{"model":"s260","prompt":[1],"max_tokens":2000,"ignore_eos":true,"stream":true}' "$URL/v1/completions" >"$tmp/long.sse" &
LONG=$!
for _ in $(seq 100); do [ -s "$tmp/long.sse" ] && break; sleep 0.05; done
post /v1/completions '{"model":"qwen","prompt":[1,5,9],"max_tokens":12,"temperature":0,"ignore_eos":true,"return_tokens":true}' "$tmp/c.json" >/dev/null
kill -0 $LONG 2>/dev/null && running=1 || running=0
n_long=$(grep -c '^data: {' "$tmp/long.sse")
check "fair round-robin: qwen answers (as alone) while s260's 2000-token stream is still running ($n_long chunks so far)" \
    [ "$(jv "$tmp/c.json" "d['choices'][0]['tokens']")" = "${WANT[qwen.0]}" -a $running = 1 -a "$n_long" -lt 1900 ]
wait $LONG
curl -s "$URL/v1/models" -o "$tmp/m.json"
check "... and all three are loaded, each with its resident bytes" \
    [ "$(jv "$tmp/m.json" "[(m['state'], m['resident_bytes'] > 0) for m in d['data']]")" = '[["loaded", true], ["loaded", true], ["loaded", true]]' ]
code=$(post /v1/completions '{"model":"nope","prompt":[1,2],"max_tokens":2}' "$tmp/e.json")
check "an unknown model name is 404 model_not_found naming the models" \
    [ $code = 404 -a "$(jv "$tmp/e.json" "[d['error']['code'], d['error']['param'], 's260, llama, qwen' in d['error']['message']]")" = '["model_not_found", "model", true]' ]
code=$(curl -s -o "$tmp/e.json" -w '%{http_code}' "$URL/v1/models/nope")
check "GET /v1/models/nope is 404" [ $code = 404 ]
code=$(curl -s -o "$tmp/e.json" -w '%{http_code}' "$URL/v1/models/qwen")
check "GET /v1/models/qwen answers for qwen" [ $code = 200 -a "$(jv "$tmp/e.json" "[d['id'], d['state']]")" = '["qwen", "loaded"]' ]
curl -s "$URL/metrics" -o "$tmp/met.txt"
check "/metrics has the loaded-models gauge and the ledger" \
    bash -c "grep -q '^caldrix_models_loaded 3$' '$tmp/met.txt' && grep -q '^caldrix_memory_ledger_bytes{kind=\"used\"} [1-9]' '$tmp/met.txt'"
per_model=$(sed -n 's/^caldrix_model_requests_total{model="\([a-z0-9]*\)",route="\/v1\/completions",status="200"} \([0-9]*\)$/\2/p' "$tmp/met.txt" | paste -sd+ | bc)
check "/metrics counts every request under its model label ($per_model)" [ "${per_model:-0}" -ge 200 ]
stop_servers

# ---- --models-max 1: alternating requests switch models; outputs unchanged; the ledger returns to 0 ----
start_server max1 --threads 2 --models-max 1 --model $S260=s260 --model "$tmp/qwen3_twin.gguf=qwen" || { bad "server --models-max 1"; fin; }
same=0 switched=0
for r in 1 2 3 4 5 6; do
    m=$([ $((r % 2)) = 1 ] && echo s260 || echo qwen); other=$([ $m = s260 ] && echo qwen || echo s260)
    post /v1/completions "{\"model\":\"$m\",\"prompt\":[1,5,9],\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true,\"return_tokens\":true}" "$tmp/c.json" >/dev/null
    [ "$(jv "$tmp/c.json" "d['choices'][0]['tokens']")" = "${WANT[$m.0]}" ] && same=$((same+1))
    curl -s "$URL/v1/models" -o "$tmp/m.json"
    [ "$(jv "$tmp/m.json" "{x['id']: x['state'] for x in d['data']}['$m'] + ' ' + {x['id']: x['state'] for x in d['data']}['$other']")" = '"loaded unloaded"' ] && switched=$((switched+1))
done
check "--models-max 1: six alternating requests each unload one model and load the other ($switched)" [ $switched = 6 ]
check "... and every output equals the model's single-model output ($same of 6)" [ $same = 6 ]
curl -s "$URL/metrics" | sed -n 's/^caldrix_memory_ledger_bytes{kind="used"} //p' >"$tmp/used1"
code=$(post /models/unload '{"model":"qwen"}' "$tmp/u.json")
curl -s "$URL/metrics" | sed -n 's/^caldrix_memory_ledger_bytes{kind="used"} //p' >"$tmp/used0"
check "POST /models/unload unloads it and the ledger returns to 0 ($(cat "$tmp/used1") -> $(cat "$tmp/used0"))" \
    [ $code = 200 -a "$(jv "$tmp/u.json" "d['state']")" = '"unloaded"' -a "$(cat "$tmp/used0")" = 0 -a "$(cat "$tmp/used1")" -gt 0 ]
code=$(post /models/load '{"model":"qwen"}' "$tmp/u.json")
check "POST /models/load loads it" [ $code = 200 -a "$(jv "$tmp/u.json" "d['state']")" = '"loaded"' ]
stop_servers

# ---- compatibility: a folder with a compatible model, a refused architecture, a truncated GGUF, an unknown one ----
D=$tmp/models
mkdir -p "$D"
cp $S260 "$D/good.gguf"
cp -r $HF/llama "$D/refused" && chmod -R u+w "$D/refused"
python3 - "$D/refused/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["architectures"] = ["GPT2LMHeadModel"]; c["model_type"] = "gpt2"
json.dump(c, open(sys.argv[1], "w"))
PY
head -c 3000 $S260 >"$D/truncated.gguf"
python3 tests/server/gguf_add_key.py $S260 "$D/unknown.gguf" llama.rope.scaling.yarn_factor 4
start_server compat --threads 1 --models-dir "$D" || { bad "server --models-dir"; fin; }
curl -s "$URL/v1/models" -o "$tmp/m.json"
check "/v1/models states: good compatible, refused and truncated incompatible, unknown unknown" \
    [ "$(jv "$tmp/m.json" "{m['id']: m['compatibility'] for m in d['data']}")" = '{"good": "compatible", "refused": "incompatible", "truncated": "incompatible", "unknown": "unknown"}' ]
check "... each not compatible with its reason (the architecture, the truncation, the key)" \
    [ "$(jv "$tmp/m.json" "[('GPT2LMHeadModel' in x.get('compatibility_reason', '')) if x['id'] == 'refused' else ('yarn_factor' in x.get('compatibility_reason', '')) if x['id'] == 'unknown' else (len(x.get('compatibility_reason', '')) > 0) == (x['id'] != 'good') for x in d['data']]")" = '[true, true, true, true]' ]
for m in refused truncated; do
    code=$(post /v1/completions "{\"model\":\"$m\",\"prompt\":[1,2],\"max_tokens\":2}" "$tmp/e.json")
    check "a request for $m is 400 INCOMPATIBLE_MODEL" [ $code = 400 -a "$(jv "$tmp/e.json" "d['error']['code']")" = '"INCOMPATIBLE_MODEL"' ]
done
code=$(post /v1/completions '{"model":"unknown","prompt":[1,2],"max_tokens":2}' "$tmp/e.json")
check "a request for the unknown one is 400 UNKNOWN_MODEL_COMPATIBILITY" [ $code = 400 -a "$(jv "$tmp/e.json" "d['error']['code']")" = '"UNKNOWN_MODEL_COMPATIBILITY"' ]
code=$(post /v1/completions '{"model":"good","prompt":[1,5,9],"max_tokens":12,"temperature":0,"ignore_eos":true,"return_tokens":true}' "$tmp/c.json")
check "the compatible one answers as alone" [ $code = 200 -a "$(jv "$tmp/c.json" "d['choices'][0]['tokens']")" = "${WANT[s260.0]}" ]
curl -s "$URL/v1/models" -o "$tmp/m.json"
check "... and no refused model was loaded" [ "$(jv "$tmp/m.json" "sorted(m['id'] for m in d['data'] if m['state'] != 'unloaded')")" = '["good"]' ]
stop_servers
start_server compat2 --threads 1 --models-dir "$D" --allow-unknown-models || { bad "server --allow-unknown-models"; fin; }
code=$(post /v1/completions '{"model":"unknown","prompt":[1,5,9],"max_tokens":12,"temperature":0,"ignore_eos":true,"return_tokens":true}' "$tmp/c.json")
check "--allow-unknown-models: the unknown one runs" [ $code = 200 -a "$(jv "$tmp/c.json" "d['choices'][0]['tokens']")" = "${WANT[s260.0]}" ]
code=$(post /v1/completions '{"model":"refused","prompt":[1,2],"max_tokens":2}' "$tmp/e.json")
check "... and never an incompatible one" [ $code = 400 -a "$(jv "$tmp/e.json" "d['error']['code']")" = '"INCOMPATIBLE_MODEL"' ]
stop_servers

# ---- admission: a budget that fits one model but not two ----
start_server probe --threads 1 --model $S260=a --model "$tmp/qwen3_twin.gguf=b" --ctx 2048 --max-batch 1 || { bad "probe server"; fin; }
post /models/load '{"model":"a"}' "$tmp/a.json" >/dev/null
post /models/load '{"model":"b"}' "$tmp/b.json" >/dev/null
RA=$(jv "$tmp/a.json" "d['resident_bytes']"); RB=$(jv "$tmp/b.json" "d['resident_bytes']")
stop_servers
BUDGET=$(( (RA > RB ? RA : RB) + (RA < RB ? RA : RB) / 2 ))
start_server budget --threads 1 --model $S260=a --model "$tmp/qwen3_twin.gguf=b" --ctx 2048 --max-batch 1 --memory $BUDGET ||
    { bad "server --memory"; fin; }
curl -s -N -m 120 -H 'Content-Type: application/json' -d '{"model":"a","prompt":[1],"max_tokens":2000,"ignore_eos":true,"stream":true}' "$URL/v1/completions" >"$tmp/long.sse" &
LONG=$!
for _ in $(seq 100); do [ -s "$tmp/long.sse" ] && break; sleep 0.05; done
code=$(post /v1/completions '{"model":"b","prompt":[1,2],"max_tokens":2}' "$tmp/e.json" -D "$tmp/hdr")
ra=$(grep -ci '^retry-after:' "$tmp/hdr")
check "a model that fits once a's request ends is 429 MODEL_RESOURCE_BUSY with Retry-After" \
    [ $code = 429 -a "$(jv "$tmp/e.json" "d['error']['code']")" = '"MODEL_RESOURCE_BUSY"' -a "$ra" = 1 ]
wait $LONG
code=$(post /v1/completions '{"model":"b","prompt":[1,5,9],"max_tokens":12,"temperature":0,"ignore_eos":true,"return_tokens":true}' "$tmp/c.json")
check "... and once it ended, b loads in a's place and answers as alone" [ $code = 200 -a "$(jv "$tmp/c.json" "d['choices'][0]['tokens']")" = "${WANT[qwen.0]}" ]
curl -s "$URL/v1/models" -o "$tmp/m.json"
check "... a was unloaded to make room" [ "$(jv "$tmp/m.json" "[m['state'] for m in d['data']]")" = '["unloaded", "loaded"]' ]
stop_servers
start_server small --threads 1 --model $S260=a --model "$tmp/qwen3_twin.gguf=b" --ctx 2048 --max-batch 1 --memory $((RA / 2)) ||
    { bad "server --memory small"; fin; }
code=$(post /v1/completions '{"model":"a","prompt":[1,2],"max_tokens":2}' "$tmp/e.json")
check "a model larger than the whole budget is 400 MODEL_RESOURCE_LIMIT naming both numbers" \
    [ $code = 400 -a "$(jv "$tmp/e.json" "[d['error']['code'], '$RA bytes' in d['error']['message'], 'budget is $((RA / 2)) bytes' in d['error']['message']]")" = '["MODEL_RESOURCE_LIMIT", true, true]' ]
stop_servers

# ---- pins, busy unloads, a file gone while unloaded ----
cp $S260 "$tmp/gone.gguf"
start_server pins --threads 1 --model $S260=a --model "$tmp/gone.gguf=gone" --model $S260=b --pin a || { bad "server --pin"; fin; }
curl -s "$URL/v1/models" -o "$tmp/m.json"
check "--pin loads the model at start" [ "$(jv "$tmp/m.json" "[m['state'] for m in d['data']]")" = '["loaded", "unloaded", "unloaded"]' ]
code=$(post /models/unload '{"model":"a"}' "$tmp/e.json")
check "unloading a pinned model is 409 model_pinned" [ $code = 409 -a "$(jv "$tmp/e.json" "d['error']['code']")" = '"model_pinned"' ]
curl -s -N -m 120 -H 'Content-Type: application/json' -d '{"model":"b","prompt":[1],"max_tokens":2000,"ignore_eos":true,"stream":true}' "$URL/v1/completions" >"$tmp/long.sse" &
LONG=$!
for _ in $(seq 100); do [ -s "$tmp/long.sse" ] && break; sleep 0.05; done
code=$(post /models/unload '{"model":"b"}' "$tmp/e.json")
check "unloading a model with a request in flight is 409 model_busy" [ $code = 409 -a "$(jv "$tmp/e.json" "d['error']['code']")" = '"model_busy"' ]
wait $LONG
rm -f "$tmp/gone.gguf"
code=$(post /v1/completions '{"model":"gone","prompt":[1,2],"max_tokens":2}' "$tmp/e.json")
check "a model whose file was deleted while unloaded is 400 model_load_failed naming it" \
    [ $code = 400 -a "$(jv "$tmp/e.json" "[d['error']['code'], 'gone' in d['error']['message']]")" = '["model_load_failed", true]' ]
curl -s "$URL/v1/models" -o "$tmp/m.json"
code=$(post /v1/completions '{"model":"a","prompt":[1,2],"max_tokens":2}' "$tmp/c.json")
check "... /v1/models marks it failed with the error, and the others still answer" \
    [ "$(jv "$tmp/m.json" "[m['state'] for m in d['data']][1] + ' ' + str('error' in d['data'][1])")" = '"failed True"' -a $code = 200 ]
code=$(post /models/load '{"model":"zzz"}' "$tmp/e.json")
check "POST /models/load of an unknown name is 404" [ $code = 404 ]
stop_servers
start_server key --threads 1 --model $S260=a --model "$tmp/qwen3_twin.gguf=b" --api-key sekrit || { bad "server --api-key"; fin; }
code=$(post /models/load '{"model":"b"}' "$tmp/e.json")
check "the admin routes need the API key" [ $code = 401 ]
code=$(post /models/load '{"model":"b"}' "$tmp/e.json" -H 'Authorization: Bearer sekrit')
check "... and work with it" [ $code = 200 ]
stop_servers

# ---- --idle-unload: a model nobody used for that long is unloaded; a pinned one stays ----
start_server idle --threads 1 --model $S260=a --model "$tmp/qwen3_twin.gguf=b" --pin b --idle-unload 1 || { bad "server --idle-unload"; fin; }
post /v1/completions '{"model":"a","prompt":[1,2],"max_tokens":2}' "$tmp/c.json" >/dev/null
curl -s "$URL/v1/models" -o "$tmp/m1.json"
sleep 2.5
curl -s "$URL/v1/models" -o "$tmp/m2.json"
check "--idle-unload 1: a is unloaded 2.5 s after its request, pinned b stays loaded" \
    [ "$(jv "$tmp/m1.json" "[m['state'] for m in d['data']]")" = '["loaded", "loaded"]' -a "$(jv "$tmp/m2.json" "[m['state'] for m in d['data']]")" = '["unloaded", "loaded"]' ]
stop_servers

# ---- bad options: exit 2 before listening ----
"$CALDRIX" serve --model $S260=x --model "$tmp/qwen3_twin.gguf=x" --port 0 >/dev/null 2>"$tmp/err"; rc=$?
said=$(grep -c 'two models are named "x"' "$tmp/err")
check "two --model entries with the same name exit 2 naming it" [ $rc = 2 -a "$said" = 1 ]
"$CALDRIX" serve --models-dir "$tmp/nowhere" --port 0 >/dev/null 2>"$tmp/err"; rc=$?
said=$(grep -c "models-dir $tmp/nowhere" "$tmp/err")
check "a --models-dir that does not exist exits 2 naming it" [ $rc = 2 -a "$said" = 1 ]
"$CALDRIX" serve --model $S260=a --pin zz --port 0 >/dev/null 2>"$tmp/err"; rc=$?
said=$(grep -c "pin zz: no model" "$tmp/err")
check "--pin of a name no model has exits 2" [ $rc = 2 -a "$said" = 1 ]
"$CALDRIX" serve $S260 --models-max 2 --port 0 >/dev/null 2>"$tmp/err"; rc=$?
check "--models-max without --model/--models-dir exits 2" [ $rc = 2 ]
fin
