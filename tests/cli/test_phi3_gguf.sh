#!/usr/bin/env bash
# Phi-3 as GGUF: `caldrix convert` of ../shared/fixtures/hf/phi3 (--name tiny-random) and `caldrix
# quantize` of it to Q8_0 give the files whose sha256 tests/golden/phi3-llamacpp.json pins, and
# caldrix's 16 greedy tokens on each equal llama.cpp's on the same file (node-llama-cpp 3.21.1,
# scripts/goldens/llamacpp-phi3.mjs) for the case where llama.cpp's LongRoPE rule agrees with
# transformers' (the long factors throughout); a step whose llama.cpp top-two gap is under 0.1 ends
# the comparison of its case (said). Through `caldrix run` (the engine): the converted F32 file also
# keeps PyTorch's golden tokens in all three cases, "medium" computed again when it passes 32 positions.
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
HF=../shared/fixtures/hf/phi3
G=tests/golden/phi3-llamacpp.json
sha() { python3 -c "import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())" "$1"; }
pinned() { python3 -c "import json; g=json.load(open('$G')); print([m for m in g['models'] if m['type']=='$1'][0]['sha256'])"; }

f32="$tmp/phi3-F32.gguf"; q8="$tmp/phi3-Q8_0.gguf"
if ! "$CALDRIX" convert $HF "$f32" --type F32 --name tiny-random 2>"$tmp/conv" ||
   ! "$CALDRIX" quantize "$f32" "$q8" Q8_0 >/dev/null 2>>"$tmp/conv"; then
    bad "phi3: convert and quantize"; cat "$tmp/conv"
fi
for t in F32 Q8_0; do
    f="$tmp/phi3-$t.gguf"
    if [ "$(sha "$f")" != "$(pinned $t)" ]; then
        bad "phi3 $t: the file is the one llama.cpp's tokens were made on (sha256 $(sha "$f"))"; continue
    fi
    ids=$(python3 -c "import json; g=json.load(open('$G')); print(','.join(map(str,[m for m in g['models'] if m['type']=='$t'][0]['cases'][0]['prompt_ids'])))")
    if "$CALDRIX" run "$f" --prompt-ids "$ids" -n 16 --temp 0 --ignore-eos --json --threads 1 >"$tmp/o.json" 2>"$tmp/err" &&
       r=$(python3 - "$G" $t "$tmp/o.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1])); c = [m for m in g['models'] if m['type'] == sys.argv[2]][0]['cases'][0]
o = json.load(open(sys.argv[3]))['tokens']
for s, (a, b) in enumerate(zip(o, c['tokens'])):
    if a != b:
        if c['top2_logit_gap'][s] < 0.1:  # Q8_0: caldrix's logits are within ~0.05 of llama.cpp's here (F32: equal)
            print('equal up to step %d, where llama.cpp\'s top two are %.3g apart' % (s, c['top2_logit_gap'][s])); sys.exit(0)
        print('step %d: %d, llama.cpp %d' % (s, a, b)); sys.exit(1)
print('16 tokens equal')
PY
); then ok "phi3 $t: llama.cpp's greedy tokens on the same file, case long ($r)"
    else bad "phi3 $t: llama.cpp's greedy tokens (${r:-$(cat "$tmp/err")})"; fi
done
# PyTorch's goldens through the engine on the F32 file, every case
i=0; good=0
for ids in $(python3 -c "import json; [print(','.join(map(str,c['prompt_ids']))) for c in json.load(open('$HF/golden.json'))['cases']]"); do
    "$CALDRIX" run "$f32" --prompt-ids "$ids" -n 16 --temp 0 --ignore-eos --json --threads 1 >"$tmp/p.json" 2>/dev/null &&
        python3 -c "import json,sys; assert json.load(open('$tmp/p.json'))['tokens'] == json.load(open('$HF/golden.json'))['cases'][$i]['tokens']" &&
        good=$((good+1))
    i=$((i+1))
done
[ $good = 3 ] && ok "phi3: caldrix run on the converted F32 file gives PyTorch's tokens in all 3 cases" ||
    bad "phi3: caldrix run on the converted F32 file gives PyTorch's tokens ($good of 3 cases)"
echo "phi3_gguf: $pass passed, $fail failed"
[ $fail -eq 0 ]
