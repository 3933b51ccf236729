#!/usr/bin/env bash
# bench/compare-embed/run.sh [THREADS]: embeddings per second of a bge-small-shaped random BERT (33M,
# bench/compare-embed/make_bert.py) converted to GGUF (F32) by caldrix convert, at batch 1, 8 and 32
# inputs of 128 token ids, caldrix (`caldrix embed FILE --ids ... --repeat 3 --json`) and llama.cpp
# (llama.mjs: node-llama-cpp 3.21.1 createEmbeddingContext) on the same file and threads, alternating.
# Needs bench/llamacpp/node_modules (cd bench/llamacpp && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install).
set -euo pipefail
cd "$(dirname "$0")/../.."
T=${1:-2}; out=bench/out/compare-embed; mkdir -p "$out"
[ -f "$out/bge-small/model.safetensors" ] || python3 bench/compare-embed/make_bert.py "$out/bge-small"
[ -f "$out/bge-small.gguf" ] || build/caldrix convert "$out/bge-small" "$out/bge-small.gguf" --type F32 >/dev/null
for B in 1 8 32; do
    args=$(python3 -c "print(' '.join('--ids ' + ','.join(map(str, [101] + [1000 + (b * 131 + i * 7) % 20000 for i in range(126)] + [102])) for b in range($B)))")
    for round in 1 2; do
        c=$(build/caldrix embed "$out/bge-small.gguf" $args --threads "$T" --repeat 3 --json | python3 -c "import json,sys; print(json.load(sys.stdin)['timings']['inputs_per_s'])")
        l=$(node bench/compare-embed/llama.mjs --nlc bench/llamacpp --model "$out/bge-small.gguf" --threads "$T" --batch "$B" --tokens 128 --repeat 3 | python3 -c "import json,sys; print(json.load(sys.stdin)['inputs_per_s'])")
        echo "bge-small batch $B round $round threads $T: caldrix $c inputs/s, llama.cpp $l inputs/s"
    done
done
