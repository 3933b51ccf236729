#!/usr/bin/env bash
# caldrix run --lora DIR[:SCALE] (issue 42 item 1) against ../shared/fixtures/train: the shipped final
# adapters reproduce the greedy tokens of golden_adapter.json through the engine (the logits are held
# to 1e-3 by tests/model/test_lora), DIR:0 is the base model's run, two adapters stack, and bad
# adapters are refused naming the field or the first mismatch (exit 1).
set -u
CALDRIX=${CALDRIX:-build/caldrix}; CALDRIX=$(cd "$(dirname "$CALDRIX")" && pwd)/$(basename "$CALDRIX")
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; echo "  out: $(head -c 400 "$tmp/out")"; echo "  err: $(head -c 400 "$tmp/err")"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
TR=../shared/fixtures/train; HF=../shared/fixtures/hf
[ -f $TR/README.md ] || { echo "0 passed, 0 failed (no fixtures)"; exit 0; }
# golden CASEDIR K: prompt ids and tokens of case K as "ids|tokens"
golden() { python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['cases'][int(sys.argv[2])]; print(','.join(map(str,c['prompt_ids']))+'|'+','.join(str(s['token']) for s in c['steps']))" "$1" "$2"; }
toks() { python3 -c "import json,sys; print(','.join(map(str,json.load(open(sys.argv[1]))['tokens'])))" "$1"; }

for spec in "llama lora_llama adapter_step30" "qwen3 lora_qwen3_all adapter_step20" "llama distill adapter_step20"; do
    set -- $spec
    for k in 0 3; do
        g=$(golden $TR/$2/golden_adapter.json $k)
        "$CALDRIX" run $HF/$1 --prompt-ids "${g%|*}" -n 16 --temp 0 --json --lora $TR/$2/$3 >"$tmp/out" 2>"$tmp/err"; rc=$?
        check "$2 case $k: run --lora gives golden_adapter.json's 16 tokens" '[ $rc -eq 0 ] && [ "$(toks "$tmp/out")" = "${g#*|}" ]'
    done
done
g=$(golden $TR/lora_llama/golden_adapter.json 3)
"$CALDRIX" run $HF/llama --prompt-ids "${g%|*}" -n 16 --temp 0 --json >"$tmp/base" 2>"$tmp/err"
"$CALDRIX" run $HF/llama --prompt-ids "${g%|*}" -n 16 --temp 0 --json --lora $TR/lora_llama/adapter_step30:0 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--lora DIR:0 is the base model's run" '[ $rc -eq 0 ] && [ "$(toks "$tmp/out")" = "$(toks "$tmp/base")" ] && [ "$(toks "$tmp/out")" != "${g#*|}" ]'
"$CALDRIX" run $HF/llama --prompt-ids "${g%|*}" -n 16 --temp 0 --json --lora $TR/lora_llama/adapter_step30:0.5 --lora $TR/lora_llama/adapter_step30:0.5 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "two adapters stack: the same adapter twice at 0.5 gives the adapter's tokens" '[ $rc -eq 0 ] && [ "$(toks "$tmp/out")" = "${g#*|}" ]'

mkdir "$tmp/dora"; ln -s "$(pwd)/$TR/lora_llama/adapter_step30/adapter_model.safetensors" "$tmp/dora/"
sed 's/"use_dora": false/"use_dora": true/' $TR/lora_llama/adapter_step30/adapter_config.json >"$tmp/dora/adapter_config.json"
"$CALDRIX" run $HF/llama -n 4 --prompt-ids 1,2,3 --lora "$tmp/dora" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "use_dora: refused by name, exit 1" '[ $rc -eq 1 ] && grep -q "use_dora is set" "$tmp/err"'
"$CALDRIX" run $HF/qwen3 -n 4 --prompt-ids 1,2,3 --lora $TR/lora_llama/adapter_step30 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "a llama adapter on qwen3: refused naming the first mismatching tensor" \
    '[ $rc -eq 1 ] && grep -q "layers.0.self_attn.q_proj" "$tmp/err"'
"$CALDRIX" run $HF/llama -n 4 --prompt-ids 1,2,3 --lora "$tmp/none" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "a path that is no adapter: refused naming it" '[ $rc -eq 1 ] && grep -q "none: not a LoRA adapter" "$tmp/err"'

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
