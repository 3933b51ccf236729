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
        # Tokens must be equal at every step. The one allowance is a near-tie: llama.cpp's own top-2
        # gap under TIE and caldrix's top two are the same two ids. stories260K is 64 wide, so one
        # q8/f16 activation rounding that flips with the f32 summation order moves its logits by
        # up to ~0.09 (measured: caldrix's scalar and AVX2 sets on the same Q4_K_M file, equal tokens,
        # top logits apart by up to 0.088), so a tie that close is decided by noise. After it,
        # llama.cpp's token is fed (teacher forcing) and every later step is compared all the same.
        if python3 - "$GOLD" "$f" "$c" "$CALDRIX" "$tmp/$type.gguf" <<'PY'; then
import json, subprocess, sys
TIE = 0.1
g = json.load(open(sys.argv[1]))['files'][int(sys.argv[2])]['cases'][int(sys.argv[3])]
caldrix, model = sys.argv[4], sys.argv[5]
gold, prompt = g['tokens'], g['prompt_ids']
s = 0
while s < len(gold):
    ids = prompt + gold[:s]
    out = subprocess.run([caldrix, 'run', model, '--prompt-ids', ','.join(map(str, ids)), '-n', str(len(gold) - s),
                          '--temp', '0', '--ignore-eos', '--json', '--top-logits', '2'],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print('  caldrix run failed: ' + out.stderr.strip()[-300:]); sys.exit(1)
    o = json.loads(out.stdout)
    if len(o['tokens']) != len(gold) - s:
        print('  caldrix gave %d tokens from step %d, expected %d' % (len(o['tokens']), s, len(gold) - s)); sys.exit(1)
    for i, a in enumerate(o['tokens']):
        b = gold[s + i]
        if a == b:
            continue
        top = o['steps'][i]['top']
        mine = top[0][1] - top[1][1]
        if g['top2_logit_gap'][s + i] < TIE and {a, b} == {top[0][0], top[1][0]}:
            print('  near-tie at step %d (llama.cpp gap %.4f, caldrix gap %.4f): llama.cpp\'s token fed, comparing on'
                  % (s + i, g['top2_logit_gap'][s + i], mine))
            s += i + 1
            break
        print('  step %d: caldrix %d, llama.cpp %d (llama.cpp gap %.4f)' % (s + i, a, b, g['top2_logit_gap'][s + i]))
        sys.exit(1)
    else:
        s = len(gold)
sys.exit(0)
PY
            pass=$((pass+1)); echo "ok - $type case $c: llama.cpp's 32 greedy tokens"
        else fail=$((fail+1)); echo "not ok - $type case $c: llama.cpp's 32 greedy tokens"; fi
    done
done
echo "quant_llamacpp: $pass passed, $fail failed"
[ $fail -eq 0 ]
