# Sourced by tests/split/test_families_{2,3}ranks.sh with NP set: every ../shared/fixtures/hf family
# whole and split over NP ranks (3-layer fixtures: at 3 ranks each layer on its own rank), tokens
# and top-5 logits compared as float bits at every step of the longest golden prompt (longer than
# any sliding window of the fixtures) and 16 decoded tokens, in each model's default compute type
# (bf16 for llama_bf16 and llama_f16). A fixture with fewer layers than ranks is refused naming both
# counts; Qwen3.5 (recurrent state) is refused by name in test_split.sh.
set -u
cd "$(dirname "$0")/../.."
. tests/split/split_lib.sh
if [ "$HAVE_SPLIT" != 1 ]; then
    echo "skipped: the split over mpirun ranks: $WHY_NO_SPLIT"
    echo "$pass passed, $fail failed, 1 skipped"
    exit 0
fi
H=../shared/fixtures/hf
for dir in "$H"/*/; do
    f=$(basename "$dir")
    case "$f" in qwen3_5*) continue ;; esac
    ids=$(prompt_of "$H/$f")
    nl=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(c.get('num_hidden_layers') or c['text_config']['num_hidden_layers'])" "$H/$f/config.json")
    if [ "$nl" -lt "$NP" ]; then
        timeout 60 $MPIRUN -np "$NP" "$CALDRIX" run "$H/$f" --allow-split --nodes "$NP" --prompt-ids 5,6 -n 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
        check "$f ($nl layers) over $NP ranks: refused, naming both counts" '[ $rc -eq 2 ] && grep -q "$NP ranks for a model of $nl layers" "$tmp/err"'
        continue
    fi
    "$CALDRIX" run "$H/$f" --prompt-ids "$ids" -n 16 --temp 0 --ignore-eos --json --top-logits 5 \
        >"$tmp/whole.json" 2>"$tmp/err"
    timeout 60 $MPIRUN -np "$NP" "$CALDRIX" run "$H/$f" --allow-split --nodes "$NP" --threads 1 --prompt-ids "$ids" -n 16 \
        --temp 0 --ignore-eos --json --top-logits 5 >"$tmp/out" 2>"$tmp/err"; rc=$?
    check "$f over $NP ranks: the same tokens and top-5 logit bits as whole ($(echo "$ids" | tr , '\n' | wc -l)-token prompt, 16 steps)" \
        '[ $rc -eq 0 ] && same_bits "$tmp/whole.json" "$tmp/out"'
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
