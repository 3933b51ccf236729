#!/usr/bin/env bash
# Makes tests/golden/perplexity-llamacpp.json: llama.cpp's llama-perplexity figures for stories260K
# (../shared/models/stories260K/stories260K.gguf, F32) on tests/golden/perplexity-text.txt (a set of
# short stories written for it, four times over: 8704 tokens, 68 windows of 128 that fall at other
# offsets in each copy; the Q4_0 KL below needs that many scored tokens to settle within a few 1e-3
# of llama.cpp's, see tests/cli/test_perplexity.sh) with a context of 128, and the KL divergence of a Q4_0
# copy (`caldrix quantize ... Q4_0`, its sha256 recorded) against the F32 file's saved log-probs.
# llama.cpp's side is scripts/goldens/llama-perplexity.c (perplexity.cpp's perplexity() and
# kl_divergence() on the shipped libllama of node-llama-cpp 3.21.1).
#
#   scripts/goldens/llamacpp-perplexity.sh [--nlc DIR] [--caldrix BIN]
#
# DIR holds node_modules/node-llama-cpp (default bench/llamacpp) and DIR/../out/llama.cpp-src or
# DIR/src the llama.cpp source of that release (for llama.h; bench/setup clones it).
set -euo pipefail
cd "$(dirname "$0")/../.."
nlc=bench/llamacpp caldrix=build/caldrix
while [ $# -gt 0 ]; do
    case "$1" in
        --nlc) nlc=$2; shift 2 ;;
        --caldrix) caldrix=$2; shift 2 ;;
        *) echo "usage: $0 [--nlc DIR] [--caldrix BIN]" >&2; exit 2 ;;
    esac
done
bins=$nlc/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
src=$nlc/src; [ -f "$src/include/llama.h" ] || src=$nlc/../out/llama.cpp-src
ver=$(node -p "require('$(realpath "$nlc")/node_modules/node-llama-cpp/package.json').version")
model=../shared/models/stories260K/stories260K.gguf
text=tests/golden/perplexity-text.txt
ctx=128
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cc -O1 -std=c11 -D_GNU_SOURCE -I"$src/include" -I"$src/ggml/include" scripts/goldens/llama-perplexity.c -o "$tmp/lp" \
    "$bins/libllama.v0.4.0.so" "$bins/libggml.v0.4.0.so" "$bins/libggml-base.so" -Wl,-rpath,"$(realpath "$bins")" -lm
"$caldrix" quantize "$model" "$tmp/q4_0.gguf" Q4_0 >/dev/null 2>&1
ppl=$("$tmp/lp" "$bins" "$model" "$text" $ctx --save "$tmp/base.kld")
kl=$("$tmp/lp" "$bins" "$tmp/q4_0.gguf" - 0 --kl "$tmp/base.kld")
plain=$("$tmp/lp" "$bins" "$model" "$text" $ctx)
cat > tests/golden/perplexity-llamacpp.json <<JSON
{"reference": "llama.cpp llama-perplexity (tools/perplexity/perplexity.cpp, ported onto libllama in scripts/goldens/llama-perplexity.c) via node-llama-cpp $ver prebuilt linux-x64 CPU: flash attention off, F32 KV cache, one sequence per decode, 2 threads",
 "model": "stories260K.gguf", "model_sha256": "$(sha256sum "$model" | cut -d' ' -f1)",
 "text": "tests/golden/perplexity-text.txt", "text_sha256": "$(sha256sum "$text" | cut -d' ' -f1)", "ctx": $ctx,
 "perplexity": $plain,
 "perplexity_saving_base": $ppl,
 "q4_0_sha256": "$(sha256sum "$tmp/q4_0.gguf" | cut -d' ' -f1)",
 "kl_divergence_q4_0": $kl}
JSON
echo "wrote tests/golden/perplexity-llamacpp.json" >&2
