#!/usr/bin/env bash
# Quantized mixtures of experts (issue 15): caldrix synth + caldrix quantize rebuild, for every file of
# tests/golden/moe-quant.json (tiny-qwen3moe and tiny-qwen2moe in F32, Q4_0, Q8_0, Q4_K_M), the file
# llama.cpp ran (sha256 recorded by scripts/goldens/llamacpp-quant-moe.mjs, which also checked that
# llama.cpp's own quantizer gives the same tensors), and caldrix run gives llama.cpp's greedy tokens
# on it (near-tie rule of tests/cli/compare_greedy.py). Then the same under --weight-budget: the
# least one token needs is accepted and one byte less refused naming both numbers, and at that
# budget (experts read from the file into packed slots, by pread and through the mapping) and at 1.5x it the tokens and top logits
# equal the resident run's exactly, and llama.cpp's greedy tokens still hold.
set -u
CALDRIX=${CALDRIX:-build/caldrix}
GOLD=tests/golden/moe-quant.json
pass=0; fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
field() { python3 -c "import json,sys; print(json.load(open('$GOLD'))['files'][$1]['$2'])"; }
n=$(python3 -c "import json; print(len(json.load(open('$GOLD'))['files']))")
for ((f = 0; f < n; f++)); do
    shape=$(field $f shape); type=$(field $f type); want=$(field $f sha256)
    [ -f "$tmp/$shape-F32.gguf" ] || "$CALDRIX" synth "$tmp/$shape-F32.gguf" --shape "$shape" --type F32 --seed 1 >/dev/null 2>&1
    [ "$type" = F32 ] || "$CALDRIX" quantize "$tmp/$shape-F32.gguf" "$tmp/$shape-$type.gguf" "$type" >/dev/null 2>&1
    file="$tmp/$shape-$type.gguf"
    got=$(sha256sum "$file" | cut -d' ' -f1)
    if [ "$got" = "$want" ]; then ok "$shape $type file is the one the golden was made from"
    else bad "$shape $type file is the one the golden was made from ($got vs $want)"; continue; fi
    nc=$(python3 -c "import json; print(len(json.load(open('$GOLD'))['files'][$f]['cases']))")
    for ((c = 0; c < nc; c++)); do
        if python3 tests/cli/compare_greedy.py "$GOLD" "$f" "$c" "$CALDRIX" "$file"; then ok "$shape $type case $c: llama.cpp's greedy tokens"
        else bad "$shape $type case $c: llama.cpp's greedy tokens"; fi
    done
    # the weight budget: the minimum from the refusal of a 1-byte budget, which names it in bytes
    msg=$("$CALDRIX" run "$file" --prompt-ids 1,2 -n 1 --weight-budget 1 2>&1 >/dev/null); rc=$?
    min=$(echo "$msg" | sed -n 's/.*one token needs: [^(]*(\([0-9]*\) bytes.*/\1/p')
    if [ $rc -ne 0 ] && [ -n "$min" ] && echo "$msg" | grep -q "dense weights + 2 experts of one layer"; then ok "$shape $type: a 1-byte budget is refused with the minimum ($min bytes)"
    else bad "$shape $type: a 1-byte budget is refused with the minimum: $msg"; continue; fi
    msg=$("$CALDRIX" run "$file" --prompt-ids 1,2 -n 1 --weight-budget $((min - 1)) 2>&1 >/dev/null); rc=$?
    if [ $rc -ne 0 ] && echo "$msg" | grep -q "($((min - 1)) bytes) is below what one token needs: .*($min bytes"; then ok "$shape $type: one byte under the minimum is refused with both numbers"
    else bad "$shape $type: one byte under the minimum is refused with both numbers (rc $rc): $msg"; fi
    ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$GOLD'))['files'][$f]['cases'][1]['prompt_ids'])))")
    "$CALDRIX" run "$file" --prompt-ids "$ids" -n 24 --temp 0 --ignore-eos --json --top-logits 5 > "$tmp/res.json" 2>/dev/null
    for b in $min $((min * 3 / 2)) mmap; do
        io=pread; [ $b = mmap ] && io=mmap b=$min
        CALDRIX_EXPERT_IO=$io "$CALDRIX" run "$file" --prompt-ids "$ids" -n 24 --temp 0 --ignore-eos --json --top-logits 5 --weight-budget $b > "$tmp/bud.json" 2>"$tmp/bud.err"
        if python3 - "$tmp/res.json" "$tmp/bud.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
sys.exit(0 if a['tokens'] == b['tokens'] and len(a['tokens']) == 24 and [s['top'] for s in a['steps']] == [s['top'] for s in b['steps']] else 1)
PY
        then ok "$shape $type: under --weight-budget $b ($io) the tokens and top-5 logits equal the resident run's exactly"
        else bad "$shape $type: under --weight-budget $b ($io) the tokens and top-5 logits equal the resident run's exactly ($(tail -c 300 "$tmp/bud.err"))"; fi
    done
    if python3 tests/cli/compare_greedy.py "$GOLD" "$f" 0 "$CALDRIX" "$file" --weight-budget "$min"; then ok "$shape $type case 0 under the minimum budget: llama.cpp's greedy tokens"
    else bad "$shape $type case 0 under the minimum budget: llama.cpp's greedy tokens"; fi
done
msg=$(CALDRIX_EXPERT_IO=bogus "$CALDRIX" run --prompt-ids 1,2 -n 1 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep -q 'CALDRIX_EXPERT_IO is "bogus"; expected pread or mmap' &&
    ok "CALDRIX_EXPERT_IO=bogus is refused by the front end, naming the variable (exit 2)" ||
    bad "CALDRIX_EXPERT_IO=bogus is refused naming the variable (rc $rc: $msg)"
echo "quant_moe: $pass passed, $fail failed"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
