#!/usr/bin/env bash
# Issue 35 item 2: logprobs spell the returned text, on every tokenizer kind of
# ../shared/fixtures/tokenizers (byte-level BPE: qwen3, llama3, smollm2; SentencePiece with byte
# fallback: mistral; WordPiece: bert). Each tokenizer goes on a 1-layer random-weight checkpoint of
# its vocabulary size (tests/server/make_tok_model.py); tests/server/tokref/logprobs_check.mjs then
# asks the server for completions and chats (sampled, forced tokens, stop strings, streamed and
# not) and checks tokens, bytes and text_offset against the Rust tokenizers (npm
# @anush008/tokenizers, pinned in tests/server/tokref/package.json, installed from the npm
# registry into tests/server/tokref/node_modules; no registry: the test fails).
# isa-neutral: tokens, bytes and offsets against the Rust tokenizers: tokenization, not arithmetic
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
TK=../shared/fixtures/tokenizers

if ! (cd tests/server/tokref && { [ -f node_modules/@anush008/tokenizers/package.json ] && [ "$(node -p "require('./node_modules/@anush008/tokenizers/package.json').version")" = "$(node -p "require('./package.json').dependencies['@anush008/tokenizers']")" ] || timeout 300 npm install --no-audit --no-fund --no-package-lock >"$tmp/npm.log" 2>&1; }); then
    bad "npm installs the pinned Rust tokenizers binding (registry unreachable?)"; cat "$tmp/npm.log"
    echo "$pass passed, $fail failed"; exit 1
fi
for k in qwen3 llama3 smollm2 mistral bert; do
    if ! python3 tests/server/make_tok_model.py "$TK/$k" "$tmp/$k" 2>"$tmp/make_$k.err"; then
        bad "$k: a random checkpoint with its tokenizer"; cat "$tmp/make_$k.err"; continue
    fi
    start_server "$k" "$tmp/$k" --threads 1 || { bad "$k: the server starts"; continue; }
    timeout 300 node tests/server/tokref/logprobs_check.mjs "$URL" "$tmp/$k" "$k" >"$tmp/check_$k.out" 2>&1
    grep -E '^(not )?ok - ' "$tmp/check_$k.out" | grep -v '^ok - ' | head -20
    grep -A1 '^not ok - ' "$tmp/check_$k.out" | grep -v '^not ok' | head -20
    n_ok=$(grep -c '^ok - ' "$tmp/check_$k.out"); n_bad=$(grep -c '^not ok - ' "$tmp/check_$k.out")
    echo "$k: $n_ok checks passed, $n_bad failed"
    check "$k: the logprobs spell the text, as the Rust tokenizer decodes it ($n_ok checks)" [ "$n_bad" = 0 -a "$n_ok" -gt 50 ]
    stop_servers
done
echo "$pass passed, $fail failed"
