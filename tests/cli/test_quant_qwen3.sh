#!/usr/bin/env bash
# Quantized Qwen3-shaped model (issue 12): caldrix synth + caldrix quantize rebuild, in every type
# of tests/golden/qwen3-quant.json, the file llama.cpp ran (sha256 recorded by
# scripts/goldens/llamacpp-quant-qwen3.mjs, which also checked that llama.cpp's own quantizer gives
# the same tensors), and caldrix run gives llama.cpp's greedy tokens on it (near-tie rule as in
# tests/cli/compare_greedy.py). QK-norm and a residual stream small next to its norms make this model
# sensitive to a single q8 activation landing one step apart, so it checks that caldrix quantizes
# activations and normalises exactly as llama.cpp's CPU backend does.
# san-skip: its quantizers and kernels run under the sanitizers in test_quant and test_kernels; this adds llama.cpp's tokens, which they cannot judge
set -u
CALDRIX=${CALDRIX:-build/caldrix}
GOLD=tests/golden/qwen3-quant.json
pass=0; fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
src=$(python3 -c "import json; print(json.load(open('$GOLD'))['source'])")
shape=$(echo "$src" | sed -n 's/.*--shape \([^ ]*\).*/\1/p'); seed=$(echo "$src" | sed -n 's/.*--seed \([0-9]*\).*/\1/p')
"$CALDRIX" synth "$tmp/F32.gguf" --shape "$shape" --type F32 --seed "$seed" >/dev/null 2>&1
n=$(python3 -c "import json; print(len(json.load(open('$GOLD'))['files']))")
for ((f = 0; f < n; f++)); do
    type=$(python3 -c "import json; print(json.load(open('$GOLD'))['files'][$f]['type'])")
    [ "$type" = F32 ] || "$CALDRIX" quantize "$tmp/F32.gguf" "$tmp/$type.gguf" "$type" >/dev/null 2>&1
    want=$(python3 -c "import json; print(json.load(open('$GOLD'))['files'][$f]['sha256'])")
    got=$(sha256sum "$tmp/$type.gguf" | cut -d' ' -f1)
    if [ "$got" = "$want" ]; then pass=$((pass+1)); echo "ok - $type file is the one the golden was made from"
    else fail=$((fail+1)); echo "not ok - $type file is the one the golden was made from ($got vs $want)"; continue; fi
    nc=$(python3 -c "import json; print(len(json.load(open('$GOLD'))['files'][$f]['cases']))")
    for ((c = 0; c < nc; c++)); do
        if python3 tests/cli/compare_greedy.py "$GOLD" "$f" "$c" "$CALDRIX" "$tmp/$type.gguf"; then
            pass=$((pass+1)); echo "ok - $type case $c: llama.cpp's greedy tokens"
        else fail=$((fail+1)); echo "not ok - $type case $c: llama.cpp's greedy tokens"; fi
    done
done
echo "quant_qwen3: $pass passed, $fail failed"
[ $fail -eq 0 ]
