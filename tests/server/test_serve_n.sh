#!/usr/bin/env bash
# n > 1 on /v1/completions and /v1/chat/completions, streamed and not: n choices with
# choices[i].index = i, choice i sampled with seed + i (so each equals the single request with that
# seed, and the whole answer is reproducible), all n identical at temperature 0, usage counting the
# prompt once and every choice's completion tokens; the n sequences share the prompt's KV blocks
# (the engine's counters: n-1 of them take the prompt's full blocks from the cache); best_of = n is
# n, best_of > n and n out of range are 400s naming the field.
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh

start_server n --threads 1 || { bad "the server starts"; echo "$pass passed, $fail failed"; exit 1; }

# ---- greedy: n identical choices ----
post /v1/completions '{"prompt":"Once upon a time","max_tokens":16,"temperature":0,"ignore_eos":true,"return_tokens":true}' "$tmp/one.json" >/dev/null
post /v1/completions '{"prompt":"Once upon a time","max_tokens":16,"temperature":0,"ignore_eos":true,"return_tokens":true,"n":3}' "$tmp/g3.json" >"$tmp/code"
check "n=3 at temperature 0 is 200 with choices 0, 1, 2" [ "$(cat "$tmp/code")" = 200 -a "$(jv "$tmp/g3.json" "[c['index'] for c in d['choices']]")" = '[0, 1, 2]' ]
check "... each the single greedy answer" [ "$(jv "$tmp/g3.json" "[c['text'] for c in d['choices']]")" = "$(jv "$tmp/one.json" "[d['choices'][0]['text']] * 3")" -a "$(jv "$tmp/one.json" "len(d['choices'][0]['tokens'])")" = 16 ]
check "usage: the prompt once, 3 x 16 completion tokens" [ "$(jv "$tmp/g3.json" "[d['usage']['prompt_tokens'], d['usage']['completion_tokens'], d['usage']['total_tokens']]")" = "$(jv "$tmp/one.json" "[d['usage']['prompt_tokens'], 48, d['usage']['prompt_tokens'] + 48]")" ]

# ---- seeds: choice i is the request with seed + i ----
B='"prompt":"Once upon a time","max_tokens":24,"temperature":1'
post /v1/completions "{$B,\"seed\":42,\"n\":3}" "$tmp/s3.json" >/dev/null
post /v1/completions "{$B,\"seed\":42,\"n\":3}" "$tmp/s3b.json" >/dev/null
for i in 0 1 2; do post /v1/completions "{$B,\"seed\":$((42 + i))}" "$tmp/s1-$i.json" >/dev/null; done
check "n=3 with seed 42: choice i equals the single request with seed 42+i" [ "$(jv "$tmp/s3.json" "[c['text'] for c in d['choices']]")" = "[$(jv "$tmp/s1-0.json" "d['choices'][0]['text']"), $(jv "$tmp/s1-1.json" "d['choices'][0]['text']"), $(jv "$tmp/s1-2.json" "d['choices'][0]['text']")]" ]
check "... the same request again gives the same choices" [ "$(jv "$tmp/s3.json" "d['choices']")" = "$(jv "$tmp/s3b.json" "d['choices']")" ]
check "... and they are not all the same sample" [ "$(jv "$tmp/s3.json" "len(set(c['text'] for c in d['choices'])) > 1")" = true ]

# ---- streamed: chunks per index, one finish each, usage summed, [DONE] ----
post /v1/completions "{$B,\"seed\":42,\"n\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" "$tmp/st.sse" >/dev/null
sse "$tmp/st.sse" >"$tmp/st.json"
check "streamed n=3: each index's text equals the non-streamed choice" [ "$(jv "$tmp/st.json" "[''.join(ch['text'] for c in d[:-1] for ch in c['choices'] if ch['index'] == i) for i in range(3)]")" = "$(jv "$tmp/s3.json" "[c['text'] for c in d['choices']]")" ]
check "... one finish_reason per index, then a usage chunk (prompt once, completions summed), then [DONE]" [ "$(jv "$tmp/st.json" "[sorted(ch['index'] for c in d[:-1] for ch in c['choices'] if ch['finish_reason']), d[-2]['choices'], d[-2]['usage']['completion_tokens'], d[-2]['usage']['prompt_tokens'], d[-1]]")" = "[[0, 1, 2], [], $(jv "$tmp/s3.json" "d['usage']['completion_tokens']"), $(jv "$tmp/s3.json" "d['usage']['prompt_tokens']"), \"[DONE]\"]" ]
CB='"messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":12,"temperature":1,"seed":5,"n":2'
post /v1/chat/completions "{$CB}" "$tmp/c2.json" >/dev/null
post /v1/chat/completions "{$CB,\"stream\":true}" "$tmp/c2.sse" >/dev/null
sse "$tmp/c2.sse" >"$tmp/c2s.json"
check "chat n=2: choices 0 and 1 with messages" [ "$(jv "$tmp/c2.json" "[[c['index'], c['message']['role']] for c in d['choices']] + [d['object']]")" = '[[0, "assistant"], [1, "assistant"], "chat.completion"]' ]
check "chat n=2 streamed: a role chunk per index, each index's content equals its choice" [ "$(jv "$tmp/c2s.json" "[sorted(ch['index'] for c in d[:-1] for ch in c['choices'] if ch['delta'].get('role')), [''.join(ch['delta'].get('content', '') for c in d[:-1] for ch in c['choices'] if ch['index'] == i) for i in range(2)]]")" = "[[0, 1], $(jv "$tmp/c2.json" "[c['message']['content'] for c in d['choices']]")]" ]
post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"temperature":0,"n":2,"logprobs":true,"top_logprobs":2}' "$tmp/cl.json" >/dev/null
check "chat n=2 with logprobs: each choice has its own, alike at temperature 0" [ "$(jv "$tmp/cl.json" "[len(d['choices'][0]['logprobs']['content']) > 0, d['choices'][0]['logprobs'] == d['choices'][1]['logprobs']]")" = '[true, true]' ]

# ---- the n sequences share the prompt's KV blocks ----
# a prompt of 40 ids no request has sent: blocks 0 and 1 (32 positions) are whole prompt blocks;
# the block of the last token is always computed. n=4: the first computes 40 positions, the other
# three find 32 each in the cache.
metric() { curl -s -m 5 "$URL/metrics" | sed -n "s/^$1 //p"; }
IDS=$(python3 -c "print(','.join(str(100 + (i * 7) % 300) for i in range(40)))")
c0=$(metric caldrix_prompt_cached_tokens_total); p0=$(metric caldrix_prompt_tokens_total)
post /v1/completions "{\"prompt\":[$IDS],\"max_tokens\":4,\"temperature\":0,\"n\":4}" "$tmp/sh.json" >/dev/null
for _ in $(seq 20); do [ "$(metric caldrix_active_sequences)" = 0 ] && break; sleep 0.1; done
c1=$(metric caldrix_prompt_cached_tokens_total); p1=$(metric caldrix_prompt_tokens_total)
check "n=4 on a new 40-token prompt: 4 x 40 prompt tokens submitted, 3 x 32 of them from the cache ($((p1 - p0)), $((c1 - c0)))" [ $((p1 - p0)) = 160 -a $((c1 - c0)) = 96 ]
check "... the answer counts the prompt once (40, none cached for the first)" [ "$(jv "$tmp/sh.json" "[d['usage']['prompt_tokens'], d['usage']['prompt_tokens_details']['cached_tokens'], len(d['choices'])]")" = '[40, 0, 4]' ]

# ---- refusals ----
e() { # e NAME WANT_PARAM BODY
    local got; got=$(post /v1/completions "$3" "$tmp/e.json")
    check "$1: 400 naming $2" [ "$got" = 400 -a "$(jv "$tmp/e.json" "d['error']['param']")" = "\"$2\"" ]
}
e "best_of 3 with n 2" best_of '{"prompt":"x","n":2,"best_of":3}'
e "best_of 1 with n 2" best_of '{"prompt":"x","n":2,"best_of":1}'
e "n 0" n '{"prompt":"x","n":0}'
e "n 129 (OpenAI's limit is 128)" n '{"prompt":"x","n":129}'
e "n 65 past --max-queue 64" n '{"prompt":"x","n":65}'
e "n as a string" n '{"prompt":"x","n":"2"}'
check "best_of equal to n is n" [ "$(post /v1/completions '{"prompt":"x","max_tokens":2,"n":2,"best_of":2}' "$tmp/bo.json")" = 200 -a "$(jv "$tmp/bo.json" "len(d['choices'])")" = 2 ]
stop_servers
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
