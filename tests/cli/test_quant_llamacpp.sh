#!/usr/bin/env bash
# Quantized stories260K: caldrix quantize writes a file that matches its regression pin, and caldrix
# run gives llama.cpp's 32 greedy tokens on it. The pin is the sha256 of caldrix's own output,
# recorded when scripts/goldens/llamacpp-quant.mjs made the golden (llama.cpp then ran that file);
# it was not checked against llama.cpp's quantizer, so it says "unchanged", not "as llama.cpp writes it".
set -u
CALDRIX=${CALDRIX:-build/caldrix}
GOLD=tests/golden/stories260K-quant.json
pass=0; fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
n=$(python3 -c "import json; print(len(json.load(open('$GOLD'))['files']))")
for ((f = 0; f < n; f++)); do
    type=$(python3 -c "import json; print(json.load(open('$GOLD'))['files'][$f]['type'])")
    "$CALDRIX" quantize ../shared/models/stories260K/stories260K.gguf "$tmp/$type.gguf" "$type" 2>/dev/null
    want=$(python3 -c "import json; print(json.load(open('$GOLD'))['files'][$f]['sha256'])")
    got=$(sha256sum "$tmp/$type.gguf" | cut -d' ' -f1)
    if [ "$got" = "$want" ]; then pass=$((pass+1)); echo "ok - $type file matches its regression pin (sha256 recorded when the golden was made)"
    else fail=$((fail+1)); echo "not ok - $type file matches its regression pin (sha256 recorded when the golden was made): $got vs $want"; fi
    nc=$(python3 -c "import json; print(len(json.load(open('$GOLD'))['files'][$f]['cases']))")
    for ((c = 0; c < nc; c++)); do
        if python3 tests/cli/compare_greedy.py "$GOLD" "$f" "$c" "$CALDRIX" "$tmp/$type.gguf"; then
            pass=$((pass+1)); echo "ok - $type case $c: llama.cpp's 32 greedy tokens"
        else fail=$((fail+1)); echo "not ok - $type case $c: llama.cpp's 32 greedy tokens"; fi
    done
done
echo "quant_llamacpp: $pass passed, $fail failed"
[ $fail -eq 0 ]
