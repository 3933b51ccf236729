#!/usr/bin/env bash
# bench/compare-embed/run.sh [THREADS]: caldrix against llama.cpp (node-llama-cpp 3.21.1, llama.mjs) on the same
# GGUF files and threads, alternating (odd rounds caldrix first, even rounds llama.cpp first), inputs of 128 token ids:
#   bge     embeddings/s of a bge-small-shaped random BERT (33M, make_bert.py), batch 1, 8, 32;
#   qwen3   embeddings/s of a Qwen3-Embedding-0.6B-shaped random decoder (596M, make_qwen3.py), last-token pooling;
#   rerank  pairs/s of the same weights as a Qwen3-Reranker-0.6B GGUF (caldrix convert --task rerank), against
#           node-llama-cpp's createRankingContext.
# caldrix: `caldrix embed|rerank FILE --ids|--pair-ids ... --threads T --repeat R --json` (all inputs in one call,
# the fastest of R calls after one warm-up call). All files are made by caldrix convert (F32).
# Which rows: MODELS (default "bge qwen3 rerank"), BATCHES_bge / BATCHES_qwen3 / BATCHES_rerank (default
# "1 8 32"), ROUNDS (2), REPEAT (3 for bge, 1 for the 0.6B models unless REPEAT is set).
# Needs bench/llamacpp/node_modules (cd bench/llamacpp && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install).
set -euo pipefail
cd "$(dirname "$0")/../.."
T=${1:-2}; out=bench/out/compare-embed; mkdir -p "$out"
C=$PWD/build/caldrix
[ -f "$out/bge-small/model.safetensors" ] || python3 bench/compare-embed/make_bert.py "$out/bge-small"
[ -f "$out/bge-small.gguf" ] || "$C" convert "$out/bge-small" "$out/bge-small.gguf" --type F32 >/dev/null 2>&1
[ -f "$out/qwen3-emb/model.safetensors" ] || python3 bench/compare-embed/make_qwen3.py "$out/qwen3-emb"
[ -f "$out/qwen3-emb.gguf" ] || "$C" convert "$out/qwen3-emb" "$out/qwen3-emb.gguf" --type F32 >/dev/null 2>&1
[ -f "$out/qwen3-rerank.gguf" ] || "$C" convert "$out/qwen3-emb-rerank" "$out/qwen3-rerank.gguf" --type F32 --task rerank \
    --yes-id 9693 --no-id 2152 >/dev/null 2>&1
echo "# $(date -u '+%F %T') UTC, threads $T, $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for M in ${MODELS:-bge qwen3 rerank}; do
    case $M in
    bge) f=$out/bge-small.gguf; bos=101; eos=102; cmd=embed; flag=--ids; nl=; rep=${REPEAT:-3} ;;
    qwen3) f=$out/qwen3-emb.gguf; bos=151643; eos=151643; cmd=embed; flag=--ids; nl=; rep=${REPEAT:-1} ;;
    rerank) f=$out/qwen3-rerank.gguf; bos=151644; eos=271; cmd=rerank; flag=--pair-ids; nl=--rank; rep=${REPEAT:-1} ;;
    esac
    bv=BATCHES_$M
    for B in ${!bv:-1 8 32}; do
        args=$(python3 -c "print(' '.join('$flag ' + ','.join(map(str, [$bos] + [1000 + (b * 131 + i * 7) % 20000 for i in range(126)] + [$eos])) for b in range($B)))")
        for round in $(seq 1 "${ROUNDS:-2}"); do
            runc() { "$C" $cmd "$f" $args --threads "$T" --repeat "$rep" --json | python3 -c "import json,sys; t=json.load(sys.stdin)['timings']; print('%.3f' % t.get('inputs_per_s', t.get('pairs_per_s')))"; }
            runl() { node bench/compare-embed/llama.mjs --nlc bench/llamacpp --model "$f" --threads "$T" --batch "$B" --tokens 128 \
                     --repeat "$rep" --bos $bos --eos $eos $nl | python3 -c "import json,sys; print('%.3f' % json.load(sys.stdin)['inputs_per_s'])"; }
            if [ $((round % 2)) -eq 1 ]; then c=$(runc); l=$(runl); else l=$(runl); c=$(runc); fi
            echo "$M batch $B round $round threads $T: caldrix $c, llama.cpp $l ($cmd/s; $(python3 -c "print('%.2fx' % ($c / $l))")) load $(cut -d' ' -f1 /proc/loadavg)"
        done
    done
done
echo "# end $(date -u '+%F %T') UTC, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
