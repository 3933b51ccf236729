#!/usr/bin/env bash
# serve --draft MODEL (issue 39), on 127.0.0.1 only: stories260K served with its own Q8_0 copy
# (caldrix quantize) as draft answers llama.cpp's greedy goldens
# (../shared/fixtures/llamacpp/stories260K.json: tokens and text) with 5 requests at once, and
# greedy and seeded completions with logprobs — 6 at once — in the same bytes as a server without
# speculation; "speculative": false opts out; /metrics counts the draft's tokens by model and
# proposer. Refusals exit 2 before "listening on", as caldrix run's: a mixture of experts or another
# vocabulary as draft, --draft with several models or with --spec lookup, a draft for a model that
# cannot speculate. --draft auto picks the Q8_0 copy from a fake Ollama cache.
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
S260=../shared/models/stories260K/stories260K.gguf
GOLD=../shared/fixtures/llamacpp/stories260K.json

"$CALDRIX" quantize "$S260" "$tmp/q8.gguf" Q8_0 >/dev/null 2>&1
start_server draft "$S260" --threads 1 --draft "$tmp/q8.gguf" --spec-keep-on --draft-max 4 \
    || { bad "the server starts with --draft"; echo "$pass passed, $fail failed"; exit 1; }
ok "the server starts with --draft (its own Q8_0 copy)"
DRAFT_URL=$URL
check "stderr names the draft model" grep -q "draft model $tmp/q8.gguf" "$tmp/draft.log"

# llama.cpp's goldens, 5 requests at once (waiting on the requests only: the server is a job too)
jobs_=()
for i in 0 1 2 3 4; do
    ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$GOLD'))['cases'][$i]['prompt_ids'])))")
    post /v1/completions "{\"prompt\":[$ids],\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true,\"return_tokens\":true}" \
        "$tmp/g$i.json" >/dev/null & jobs_+=($!)
done
wait "${jobs_[@]}"
good=0; texts=0
for i in 0 1 2 3 4; do
    python3 - "$GOLD" "$i" "$tmp/g$i.json" <<'PY' && good=$((good+1))
import json, sys
c = json.load(open(sys.argv[1]))['cases'][int(sys.argv[2])]
d = json.load(open(sys.argv[3]))
sys.exit(not (d['choices'][0]['tokens'] == c['tokens'] and d['usage']['completion_tokens_details']['accepted_prediction_tokens'] > 0))
PY
    [ "$(jv "$tmp/g$i.json" "d['choices'][0]['text']")" = "$(python3 -c "import json; print(json.dumps(json.load(open('$GOLD'))['cases'][$i]['text']))")" ] && texts=$((texts+1))
done
check "5 requests at once with the draft: llama.cpp's 32 greedy tokens for every case, draft tokens kept" [ $good -eq 5 ]
check "... and llama.cpp's text for every case" [ $texts -eq 5 ]

# greedy and seeded with logprobs, 6 at once, with the draft and opted out
jobs_=()
body() { # i: a prompt of ids, greedy for even i, temperature 0.9 with seed 200+i otherwise
    local i=$1 ids temp
    ids=$(python3 -c "print(','.join(str(1 + ((j % (3 + $i)) * 7 + $i) % 500) for j in range(10 + 5 * $i)))")
    temp=$([ $((i % 2)) -eq 0 ] && echo 0 || echo 0.9)
    echo "\"prompt\":[${ids}],\"max_tokens\":40,\"temperature\":$temp,\"seed\":$((200 + i)),\"logprobs\":5,\"return_tokens\":true"
}
for i in 0 1 2 3 4 5; do
    post /v1/completions "{$(body $i)}" "$tmp/a$i.json" >/dev/null & jobs_+=($!)
    post /v1/completions "{$(body $i),\"speculative\":false}" "$tmp/o$i.json" >/dev/null & jobs_+=($!)
done
wait "${jobs_[@]}"
curl -s -m 5 "$URL/metrics" -o "$tmp/metrics"
stop_servers

start_server plain "$S260" --threads 1 || { bad "the plain server starts"; echo "$pass passed, $fail failed"; exit 1; }
jobs_=()
for i in 0 1 2 3 4 5; do post /v1/completions "{$(body $i)}" "$tmp/p$i.json" >/dev/null & jobs_+=($!); done
wait "${jobs_[@]}"
same=0; optout=0; kept=0
for i in 0 1 2 3 4 5; do
    c=$(jv "$tmp/p$i.json" "d['choices']")
    [ -n "$(jv "$tmp/p$i.json" "d['choices'][0]['tokens']")" ] && [ "$(jv "$tmp/a$i.json" "d['choices']")" = "$c" ] && same=$((same+1))
    [ "$(jv "$tmp/o$i.json" "d['choices']")" = "$c" ] && [ "$(jv "$tmp/o$i.json" "'completion_tokens_details' in d['usage']")" = false ] && optout=$((optout+1))
    kept=$((kept + $(jv "$tmp/a$i.json" "d['usage']['completion_tokens_details']['accepted_prediction_tokens']" || echo 0)))
done
check "6 completions at once (greedy and seeded, logprobs 5): the same choices (tokens, text, logprobs) as a server without speculation" [ $same -eq 6 ]
check "\"speculative\": false beside them: the same choices, no prediction details" [ $optout -eq 6 ]
drafted=$(sed -n 's/^caldrix_model_spec_draft_tokens_total{model="stories260K",proposer="draft"} \([0-9]*\)$/\1/p' "$tmp/metrics")
mkept=$(sed -n 's/^caldrix_model_spec_accepted_tokens_total{model="stories260K",proposer="draft"} \([0-9]*\)$/\1/p' "$tmp/metrics")
check "/metrics: draft tokens by model and proposer ($drafted proposed, $mkept kept >= the usages' $kept)" \
    [ "${drafted:-0}" -gt 0 -a "${mkept:-0}" -le "${drafted:-0}" -a "${mkept:-0}" -ge "$kept" ]
curl -s -m 5 "$URL/metrics" -o "$tmp/metrics2"
check "/metrics without speculation: no per-model draft series" bash -c "! grep -q '^caldrix_model_spec_draft_tokens_total{' '$tmp/metrics2'"
stop_servers

# --draft auto: the Q8_0 copy from a fake Ollama cache (offline), said on stderr; llama.cpp's tokens
mkdir -p "$tmp/hf" "$tmp/cache/ollama/blobs" "$tmp/cache/ollama/manifests/registry.ollama.ai/library/storiesq8"
hex=$(sha256sum "$tmp/q8.gguf" | cut -d' ' -f1)
cp "$tmp/q8.gguf" "$tmp/cache/ollama/blobs/sha256-$hex"
printf '{"schemaVersion":2,"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:%s","size":%s}]}' \
    "$hex" "$(stat -c %s "$tmp/q8.gguf")" >"$tmp/cache/ollama/manifests/registry.ollama.ai/library/storiesq8/latest"
CALDRIX_CACHE=$tmp/cache HF_HUB_CACHE=$tmp/hf CALDRIX_OFFLINE=1 start_server auto "$S260" --threads 1 --draft auto --spec-keep-on
check "serve --draft auto: the cached Q8_0 copy chosen, said on stderr" grep -q "draft auto chose .*/storiesq8/latest/model.gguf" "$tmp/auto.log"
ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$GOLD'))['cases'][1]['prompt_ids'])))")
post /v1/completions "{\"prompt\":[$ids],\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true,\"return_tokens\":true}" "$tmp/auto.json" >/dev/null
check "... llama.cpp's 32 greedy tokens, draft tokens kept" python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['cases'][1]; d=json.load(open(sys.argv[2])); sys.exit(not (d['choices'][0]['tokens'] == c['tokens'] and d['usage']['completion_tokens_details']['accepted_prediction_tokens'] > 0))" "$GOLD" "$tmp/auto.json"
# the draft's outcome is saved while serving (every 10 s once requests speculated), so a server
# killed with SIGKILL has still left it for `caldrix models drafts`
sleep 11
kill -9 "${SERVER_PIDS[@]}" 2>/dev/null; wait "${SERVER_PIDS[@]}" 2>/dev/null; SERVER_PIDS=()
CALDRIX_CACHE=$tmp/cache HF_HUB_CACHE=$tmp/hf CALDRIX_OFFLINE=1 "$CALDRIX" models drafts "$S260" >"$tmp/drafts.txt" 2>&1
check "a server killed with SIGKILL left its draft's outcome: models drafts says \"last run on this machine: ... stayed on\" by serve" \
    grep -q "storiesq8/latest/model.gguf.*last run on this machine: .*storiesq8/latest/model.gguf stayed on (accepted [1-9][0-9]* of [0-9]*, caldrix serve" "$tmp/drafts.txt"
stop_servers

# refusals: exit 2 before listening, as caldrix run's
refused() { # name, expected text, serve args...
    local name=$1 want=$2; shift 2
    "$CALDRIX" serve "$@" --host 127.0.0.1 --port 0 >"$tmp/r.log" 2>&1 & local p=$!
    SERVER_PIDS+=("$p")
    for _ in $(seq 600); do kill -0 $p 2>/dev/null || break; grep -q "listening on" "$tmp/r.log" && break; sleep 0.1; done
    wait $p 2>/dev/null; local rc=$?
    SERVER_PIDS=()
    if [ $rc -eq 2 ] && grep -q -- "$want" "$tmp/r.log" && ! grep -q "listening on" "$tmp/r.log"; then ok "$name"
    else bad "$name"; echo "  rc $rc: $(head -c 400 "$tmp/r.log")"; fi
}
refused "a mixture of experts as draft: refused by name, exit 2" "is a mixture of experts" "$S260" --draft ../shared/fixtures/hf/qwen3_moe
refused "a draft of another vocabulary: refused naming both models, exit 2" "draft ../shared/fixtures/hf/llama for $S260" \
    "$S260" --draft ../shared/fixtures/hf/llama
refused "--draft with several models: exit 2" "is for one served model" --model "$S260" --draft "$tmp/q8.gguf"
refused "--draft with --spec lookup: exit 2" "give --spec auto" "$S260" --draft "$tmp/q8.gguf" --spec lookup
refused "a draft for Qwen3.5 (recurrent state): exit 2 with the reason" "recurrent state" ../shared/fixtures/hf/qwen3_5 \
    --draft ../shared/fixtures/hf/qwen3_5

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
