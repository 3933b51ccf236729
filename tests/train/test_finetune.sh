#!/usr/bin/env bash
# caldrix finetune / distill (issue 42 items 2, 3) against ../shared/fixtures/train: the command line
# with the cases' settings gives PyTorch's loss at every step in --log (abs 1e-4), the adapters of
# --save-at and DIR within abs 2e-4 of adapter_step*, the full fine-tune's checkpoint within 5e-5 of
# the fixture's model.safetensors; the trained adapter run through `caldrix run --lora` gives
# golden_adapter.json's tokens on the cases with min_gap >= 0.02; --resume from checkpoint-10 writes
# the uninterrupted run's adapter byte for byte; bad input is refused (exit 2) naming what is wrong.
set -u
CALDRIX=${CALDRIX:-build/caldrix}; CALDRIX=$(cd "$(dirname "$CALDRIX")" && pwd)/$(basename "$CALDRIX")
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; echo "  err: $(tail -c 600 "$tmp/err")"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
TR=../shared/fixtures/train; HF=../shared/fixtures/hf
[ -f $TR/README.md ] || { echo "0 passed, 1 failed (no fixtures in $TR)"; exit 1; }
# losses LOG CASE RUN: max |log loss - case.json loss| over every step (and the step count must match)
losses() { python3 - "$@" <<'PY'
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
want = json.load(open(sys.argv[2]))['runs'][sys.argv[3]]['loss']
assert [r['step'] for r in log] == list(range(len(want))), 'steps'
print(max(abs(r['loss'] - w) for r, w in zip(log, want)))
PY
}
# stdiff A B: max |a - b| over the tensors of two safetensors files (the same names and shapes)
stdiff() { python3 - "$@" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    return {k: (v['shape'], struct.unpack('<%df' % ((v['data_offsets'][1] - v['data_offsets'][0]) // 4),
            b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]])) for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(a) == sorted(b), 'names differ'
print(max(max(abs(x - y) for x, y in zip(a[k][1], b[k][1])) if a[k][0] == b[k][0] else 1e9 for k in a))
PY
}
le() { python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$1" "$2" 2>/dev/null; }
common="--batch 2 --grad-accum 2 --no-shuffle --lr 0.01"

# LoRA on llama with weight decay 0.01
"$CALDRIX" finetune $HF/llama --data $TR/lora_llama/train.jsonl --out "$tmp/ll" --init-adapter $TR/lora_llama/adapter_init \
    $common --weight-decay 0.01 --steps 30 --save-at 1,10 --log "$tmp/ll.jsonl" >"$tmp/out" 2>"$tmp/err"; rc=$?
d=$(losses "$tmp/ll.jsonl" $TR/lora_llama/case.json wd0.01)
check "finetune lora_llama wd 0.01: the loss of every step within 1e-4 of PyTorch's (max $d)" '[ $rc -eq 0 ] && le "$d" 1e-4'
for s in 1 10; do
    d=$(stdiff "$tmp/ll/step-$s/adapter_model.safetensors" $TR/lora_llama/wd0.01/adapter_step$s/adapter_model.safetensors)
    check "lora_llama wd 0.01: DIR/step-$s within 2e-4 of adapter_step$s (max $d)" 'le "$d" 2e-4'
done
d=$(stdiff "$tmp/ll/adapter_model.safetensors" $TR/lora_llama/wd0.01/adapter_step30/adapter_model.safetensors)
check "lora_llama wd 0.01: DIR holds the last adapter, within 2e-4 of adapter_step30 (max $d)" 'le "$d" 2e-4'
check "adapter_config.json has PEFT's fields and values" \
    'python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); d=[k for k in b if k!=\"base_model_name_or_path\" and a.get(k,0)!=b[k]]; sys.exit(1 if d or sorted(a)!=sorted(b) else 0)" "$tmp/ll/adapter_config.json" $TR/lora_llama/adapter_init/adapter_config.json'
g=$(python3 -c "
import json,sys; c=json.load(open(sys.argv[1]))['cases']
print(' '.join(','.join(map(str,x['prompt_ids']))+'|'+','.join(str(s['token']) for s in x['steps']) for x in c if x['min_gap']>=0.02))" $TR/lora_llama/wd0.01/golden_adapter.json)
n=0; good=0
for c in $g; do
    n=$((n+1))
    "$CALDRIX" run $HF/llama --prompt-ids "${c%|*}" -n 16 --temp 0 --json --lora "$tmp/ll" >"$tmp/run" 2>>"$tmp/err" &&
        [ "$(python3 -c "import json,sys; print(','.join(map(str,json.load(open(sys.argv[1]))['tokens'])))" "$tmp/run")" = "${c#*|}" ] && good=$((good+1))
done
check "run --lora with the trained adapter: golden_adapter.json's tokens on its $n cases with min_gap >= 0.02" '[ $n -ge 3 ] && [ $good -eq $n ]'

# LoRA on all seven modules of qwen3 (r 8, from adapter_init), checkpoints and --resume
"$CALDRIX" finetune $HF/qwen3 --data $TR/lora_qwen3_all/train.jsonl --out "$tmp/q1" --init-adapter $TR/lora_qwen3_all/adapter_init \
    $common --steps 20 --checkpoint-every 10 --log "$tmp/q1.jsonl" >"$tmp/out" 2>"$tmp/err"; rc=$?
d=$(losses "$tmp/q1.jsonl" $TR/lora_qwen3_all/case.json wd0.0)
check "finetune lora_qwen3_all: the loss of every step within 1e-4 (max $d)" '[ $rc -eq 0 ] && le "$d" 1e-4'
d=$(stdiff "$tmp/q1/adapter_model.safetensors" $TR/lora_qwen3_all/adapter_step20/adapter_model.safetensors)
check "lora_qwen3_all: the final adapter within 2e-4 of adapter_step20 (max $d)" 'le "$d" 2e-4'
check "--checkpoint-every 10 wrote checkpoint-10 and checkpoint-20 (adapter, optimizer state, step)" \
    '[ -f "$tmp/q1/checkpoint-10/optimizer.safetensors" ] && [ -f "$tmp/q1/checkpoint-20/adapter_model.safetensors" ] && grep -q "\"step\": 10" "$tmp/q1/checkpoint-10/trainer_state.json"'
cp "$tmp/q1.jsonl" "$tmp/q2.jsonl"; head -10 "$tmp/q1.jsonl" >"$tmp/q2.jsonl"
"$CALDRIX" finetune $HF/qwen3 --data $TR/lora_qwen3_all/train.jsonl --out "$tmp/q2" --init-adapter $TR/lora_qwen3_all/adapter_init \
    $common --steps 20 --resume "$tmp/q1/checkpoint-10" --log "$tmp/q2.jsonl" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--resume checkpoint-10 writes the uninterrupted run's adapter, byte for byte" \
    '[ $rc -eq 0 ] && cmp -s "$tmp/q1/adapter_model.safetensors" "$tmp/q2/adapter_model.safetensors"'
check "--resume logs steps 10..19 with the uninterrupted run's losses" 'cmp -s "$tmp/q1.jsonl" "$tmp/q2.jsonl"'
# the checkpoint brings its LoRA options: --resume alone (no --init-adapter) gives the same adapter,
# and an option that disagrees with the checkpoint's is refused naming it
"$CALDRIX" finetune $HF/qwen3 --data $TR/lora_qwen3_all/train.jsonl --out "$tmp/q4" \
    $common --steps 20 --resume "$tmp/q1/checkpoint-10" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--resume without the LoRA options: the checkpoint's r, alpha and targets, the uninterrupted run's adapter byte for byte" \
    '[ $rc -eq 0 ] && cmp -s "$tmp/q1/adapter_model.safetensors" "$tmp/q4/adapter_model.safetensors"'
"$CALDRIX" finetune $HF/qwen3 --data $TR/lora_qwen3_all/train.jsonl --out "$tmp/q5" --lora-r 4 \
    $common --steps 20 --resume "$tmp/q1/checkpoint-10" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--resume with --lora-r 4 on an r 8 checkpoint: exit 2 naming both" \
    '[ $rc -eq 2 ] && grep -q "checkpoint-10/adapter_config.json: the adapter has r 8, .*the options given differ" "$tmp/err"'
"$CALDRIX" finetune $HF/qwen3 --data $TR/lora_qwen3_all/train.jsonl --out "$tmp/q3" --lora-r 2 --lora-targets k_proj,o_proj,down_proj \
    --seed 7 --steps 3 --batch 3 --log "$tmp/q3.jsonl" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "another rank and targets with a drawn A (no golden): runs and writes r 2 and the sorted targets" \
    '[ $rc -eq 0 ] && python3 -c "import json,sys; a=json.load(open(sys.argv[1])); sys.exit(0 if json.loads(open(sys.argv[2]).readline())[\"num_items\"]>0 and a[\"r\"]==2 and a[\"target_modules\"]==[\"down_proj\",\"k_proj\",\"o_proj\"] else 1)" "$tmp/q3/adapter_config.json" "$tmp/q3.jsonl"'

# full fine-tuning
"$CALDRIX" finetune $HF/llama --data $TR/full_ft_llama/train.jsonl --out "$tmp/ff" --full --batch 2 --grad-accum 2 --no-shuffle \
    --lr 0.001 --steps 10 --log "$tmp/ff.jsonl" >"$tmp/out" 2>"$tmp/err"; rc=$?
d=$(losses "$tmp/ff.jsonl" $TR/full_ft_llama/case.json wd0.0)
check "finetune --full: the loss of every step within 1e-4 (max $d)" '[ $rc -eq 0 ] && le "$d" 1e-4'
d=$(stdiff "$tmp/ff/model.safetensors" $TR/full_ft_llama/model.safetensors)
check "finetune --full: every final weight within 5e-5 of the fixture's (max $d)" 'le "$d" 5e-5'
g=$(python3 -c "import json,sys; c=[x for x in json.load(open(sys.argv[1]))['cases'] if x['min_gap']>=0.02][0]; print(','.join(map(str,c['prompt_ids']))+'|'+','.join(str(s['token']) for s in c['steps']))" $TR/full_ft_llama/golden.json)
"$CALDRIX" run "$tmp/ff" --prompt-ids "${g%|*}" -n 16 --temp 0 --json >"$tmp/run" 2>"$tmp/err"; rc=$?
check "the full checkpoint runs and gives golden.json's tokens" \
    '[ $rc -eq 0 ] && [ "$(python3 -c "import json,sys; print(\",\".join(map(str,json.load(open(sys.argv[1]))[\"tokens\"])))" "$tmp/run")" = "${g#*|}" ]'

# distillation: qwen2 teacher, llama student
"$CALDRIX" distill --teacher $HF/qwen2 --student $HF/llama --data $TR/distill/train.jsonl --out "$tmp/di" \
    --init-adapter $TR/distill/adapter_init $common --steps 20 --temperature 2 --kd-weight 0.5 --log "$tmp/di.jsonl" >"$tmp/out" 2>"$tmp/err"; rc=$?
d=$(losses "$tmp/di.jsonl" $TR/distill/case.json wd0.0)
check "distill: 0.5·KD·T² + 0.5·CE at every step within 1e-4 (max $d)" '[ $rc -eq 0 ] && le "$d" 1e-4'
d=$(stdiff "$tmp/di/adapter_model.safetensors" $TR/distill/adapter_step20/adapter_model.safetensors)
check "distill: the final adapter within 2e-4 of adapter_step20 (max $d)" 'le "$d" 2e-4'

# refusals
G=../shared/models/stories260K/stories260K.gguf
"$CALDRIX" finetune $G --data $TR/lora_llama/train.jsonl --out "$tmp/x" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "a GGUF student: exit 2 naming the two ways to trainable weights" \
    '[ $rc -eq 2 ] && grep -q "safetensors checkpoint" "$tmp/err" && grep -q "caldrix convert" "$tmp/err"'
printf '{"input_ids": [1, 2], "labels": [-100, 2]}\n{"input_ids": [1, 2], "labels": [5]}\n' >"$tmp/bad.jsonl"
"$CALDRIX" finetune $HF/llama --data "$tmp/bad.jsonl" --out "$tmp/x" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "labels of another length: exit 2 naming the file and line" '[ $rc -eq 2 ] && grep -q "bad.jsonl:2" "$tmp/err"'
printf '{"input_ids": [1, 999]}\n' >"$tmp/bad.jsonl"
"$CALDRIX" finetune $HF/llama --data "$tmp/bad.jsonl" --out "$tmp/x" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "an id outside the vocabulary: exit 2 naming it" '[ $rc -eq 2 ] && grep -q "input_ids\[1\] is 999" "$tmp/err"'
"$CALDRIX" finetune $HF/llama --data $TR/lora_llama/train.jsonl --out "$tmp/x" --lora-targets q_proj,lm_head >"$tmp/out" 2>"$tmp/err"; rc=$?
check "an unknown LoRA target: exit 2 naming it" '[ $rc -eq 2 ] && grep -q "lm_head" "$tmp/err"'
"$CALDRIX" finetune $HF/llama --data $TR/lora_llama/train.jsonl --out "$tmp/x" --lora-r 4 --lora-alpha 8 --resume $TR/lora_llama/adapter_step10 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--resume of an adapter without optimizer state: exit 2 saying it is not a checkpoint" '[ $rc -eq 2 ] && grep -q "not a checkpoint" "$tmp/err"'

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
