#!/usr/bin/env bash
# The GGUF twins of the fixtures/hf families (caldrix convert --type Q8_0: the quantized matmuls and
# llama.cpp's tensor layout) whole and split, alternately over 2 and 3 ranks (the checkpoints
# themselves run over both in test_families_{2,3}ranks.sh): tokens and top-5 logits as float bits at
# every step of the longest golden prompt and 16 decoded tokens. Skipped, saying so, without mpirun.
# san-skip: the split's code runs under the sanitizers in test_split.sh (2 and 3 ranks); these repeat it per family, for the arithmetic
set -u
cd "$(dirname "$0")/../.."
. tests/split/split_lib.sh
if [ "$HAVE_SPLIT" != 1 ]; then
    echo "skipped: the split over mpirun ranks: $WHY_NO_SPLIT"
    echo "$pass passed, $fail failed, 1 skipped"
    exit 0
fi
H=../shared/fixtures/hf
k=0
for dir in "$H"/*/; do
    f=$(basename "$dir")
    case "$f" in qwen3_5*|idefics3) continue ;; esac # Qwen3.5 is not split; convert does not take a vision model
    np=$((2 + k % 2)); k=$((k + 1))
    if ! "$CALDRIX" convert "$H/$f" "$tmp/$f.gguf" --type Q8_0 >/dev/null 2>"$tmp/err"; then
        bad "$f: caldrix convert --type Q8_0"; cat "$tmp/err"; continue
    fi
    ids=$(prompt_of "$H/$f")
    "$CALDRIX" run "$tmp/$f.gguf" --prompt-ids "$ids" -n 16 --temp 0 --ignore-eos --json --top-logits 5 \
        >"$tmp/whole.json" 2>"$tmp/err"
    timeout 60 $MPIRUN -np $np "$CALDRIX" run "$tmp/$f.gguf" --allow-split --nodes $np --threads 1 --prompt-ids "$ids" -n 16 \
        --temp 0 --ignore-eos --json --top-logits 5 >"$tmp/out" 2>"$tmp/err"; rc=$?
    check "$f as GGUF Q8_0 over $np ranks: the same tokens and top-5 logit bits as whole" \
        '[ $rc -eq 0 ] && same_bits "$tmp/whole.json" "$tmp/out"'
    rm -f "$tmp/$f.gguf"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
