#!/usr/bin/env bash
# serve --spec lookup (issue 39), on 127.0.0.1 only: greedy and seeded completions with logprobs are
# the same bytes with speculation as with a request's "speculative": false beside them, and as
# `caldrix run` without speculation; usage.completion_tokens_details gives OpenAI's
# accepted/rejected_prediction_tokens; /metrics counts draft tokens; a bad "speculative" is a 400;
# Qwen3.5 (recurrent state) is served without speculation, saying why.
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
S260=../shared/models/stories260K/stories260K.gguf

start_server spec --threads 1 --spec lookup --spec-keep-on --draft-max 4 || { bad "the server starts with --spec lookup"; echo "$pass passed, $fail failed"; exit 1; }
ok "the server starts with --spec lookup"

same=0; details=0; optout=0
for i in 0 1 2 3; do
    IDS=$(python3 -c "print(','.join(str(1 + ((j % (3 + $i)) * 7 + $i) % 500) for j in range(12 + 5 * $i)))")
    temp=$([ $((i % 2)) -eq 0 ] && echo 0 || echo 0.9)
    B="\"prompt\":[${IDS}],\"max_tokens\":40,\"temperature\":$temp,\"seed\":$((100 + i)),\"logprobs\":5,\"return_tokens\":true"
    post /v1/completions "{$B}" "$tmp/a$i.json" >/dev/null
    post /v1/completions "{$B,\"speculative\":false}" "$tmp/b$i.json" >/dev/null
    [ "$(jv "$tmp/a$i.json" "d['choices']")" = "$(jv "$tmp/b$i.json" "d['choices']")" ] && [ -n "$(jv "$tmp/a$i.json" "d['choices'][0]['tokens']")" ] && same=$((same+1))
    [ "$(jv "$tmp/a$i.json" "sorted(d['usage']['completion_tokens_details'].keys())")" = '["accepted_prediction_tokens", "rejected_prediction_tokens"]' ] && details=$((details+1))
    [ "$(jv "$tmp/b$i.json" "'completion_tokens_details' in d['usage']")" = false ] && optout=$((optout+1))
done
check "4 completions (greedy and seeded, logprobs 5): the same choices with and without speculation" [ $same -eq 4 ]
check "usage.completion_tokens_details: accepted_prediction_tokens and rejected_prediction_tokens" [ $details -eq 4 ]
check "\"speculative\": false: no prediction details (the request did not speculate)" [ $optout -eq 4 ]

IDS=1,403,407,261,378,267,300
"$CALDRIX" run "$S260" --prompt-ids $IDS -n 24 --temp 0 --json >"$tmp/run.json" 2>/dev/null
post /v1/completions "{\"prompt\":[${IDS}],\"max_tokens\":24,\"temperature\":0,\"return_tokens\":true}" "$tmp/c.json" >/dev/null
check "greedy with speculation equals caldrix run without it, token for token" \
    [ "$(jv "$tmp/c.json" "d['choices'][0]['tokens']")" = "$(jv "$tmp/run.json" "d['tokens']")" ]

curl -s -m 5 "$URL/metrics" -o "$tmp/metrics"
drafted=$(sed -n 's/^caldrix_spec_draft_tokens_total \([0-9]*\)$/\1/p' "$tmp/metrics")
kept=$(sed -n 's/^caldrix_spec_accepted_tokens_total \([0-9]*\)$/\1/p' "$tmp/metrics")
check "/metrics: caldrix_spec_draft_tokens_total ($drafted) > 0, caldrix_spec_accepted_tokens_total ($kept) <= it" \
    [ "${drafted:-0}" -gt 0 -a "${kept:-0}" -le "${drafted:-0}" ]
acc=$(for i in 0 1 2 3; do jv "$tmp/a$i.json" "d['usage']['completion_tokens_details']['accepted_prediction_tokens']"; done | awk '{s+=$1} END {print s+0}')
check "the usages' accepted tokens ($acc) are among the kept draft tokens the engine counted" [ "$acc" -le "${kept:-0}" ]

code=$(post /v1/completions '{"prompt":"Once","max_tokens":4,"speculative":"no"}' "$tmp/e.json")
check "\"speculative\": \"no\" is a 400 naming the field" [ "$code" = 400 -a "$(jv "$tmp/e.json" "d['error']['param']")" = '"speculative"' ]
stop_servers

start_server q35 ../shared/fixtures/hf/qwen3_5 --threads 1 --spec lookup
check "serve --spec lookup on Qwen3.5 (recurrent state): it loads, served without speculation" [ -n "${URL#http://127.0.0.1:}" ]
check "... and stderr says why" grep -q "no speculative decoding (--spec lookup) for ../shared/fixtures/hf/qwen3_5: its recurrent state" "$tmp/q35.log"
curl -s -m 5 "$URL/v1/models" -o "$tmp/q35m.json"
check "... as /v1/models' speculation_off_reason" grep -q '"speculation_off_reason": *"no speculative decoding' "$tmp/q35m.json"
code=$(post /v1/completions '{"prompt":[1,2,3],"max_tokens":4,"temperature":0}' "$tmp/q35c.json")
check "... a completion runs (4 tokens, no prediction details)" [ "$code" = 200 -a "$(jv "$tmp/q35c.json" "d['usage']['completion_tokens']")" = 4 -a "$(jv "$tmp/q35c.json" "'completion_tokens_details' in d['usage']")" = false ]
stop_servers
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
