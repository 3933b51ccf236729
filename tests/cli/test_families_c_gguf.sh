#!/usr/bin/env bash
# The families without a fixture in ../shared (OLMo, GPT-OSS, BitNet) as GGUF: scripts/goldens/tiny_fixtures.py writes
# each tiny checkpoint, `caldrix convert` (F32, general.name tiny-random) and `caldrix quantize` to each type
# the golden lists (Q8_0; GPT-OSS also MXFP4_MOE, the published files' MXFP4 experts; BitNet TQ1_0 and TQ2_0
# on a 256-wide SiLU checkpoint, its ternary weights exact in them) give the files whose
# sha256 tests/golden/families-c-llamacpp.json pins (llama.cpp's own quantizer wrote the same tensors where
# the golden says tensors_equal_llamacpp_quantizer), and caldrix's 16 greedy tokens on each equal llama.cpp's
# on the same file (node-llama-cpp 3.21.1, scripts/goldens/llamacpp-families-c.mjs); a step whose llama.cpp
# top-two gap is under 0.02 ends the comparison of its case (said). caldrix's tokens on the F32 file also
# equal its own on the checkpoint (whose path tests/model/test_families_c.c checks against PyTorch), but for
# BitNet's: a bitnet file computes llama.cpp's graph, activations unquantized, and test_families_c.c checks it is
# the checkpoint computed so (its tokens may part from the checkpoint's int8 activations').
# GPT-OSS's YaRN: transformers' gpt-oss config says truncate false, GGUF has no key for it, and llama.cpp
# (ggml_rope_yarn_corr_dims) always floors/ceils the correction range, as caldrix does on the file: the
# logits differ from the checkpoint's by up to ~2e-2 on these cases, the tokens do not (test_families_c.c
# shows the file is the checkpoint with truncate true, bit for bit). convert refuses what the file cannot
# say: another swiglu_limit (llama.cpp's 7 is a constant) and sliding layers that are not every other one
# from layer 0 (attention.sliding_window_pattern is a period).
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
G=tests/golden/families-c-llamacpp.json

cat >"$tmp/cmp.py" <<'PY'
import json, sys
g = json.load(open(sys.argv[1])); name, typ, outs = sys.argv[2], sys.argv[3], sys.argv[4]
m = [x for x in g['models'] if x['name'] == name and x['type'] == typ][0]
msgs = []; bad = 0
for i, c in enumerate(m['cases']):
    o = json.load(open(outs + str(i)))['tokens']
    for s, (a, b) in enumerate(zip(o, c['tokens'])):
        if a != b:
            if c['top2_logit_gap'][s] < 0.02:
                msgs.append('case %d: equal up to step %d, where llama.cpp\'s top two are %.3g apart' % (i, s, c['top2_logit_gap'][s]))
            else:
                bad += 1; msgs.append('case %d step %d: %d, llama.cpp %d (gap %.3g)' % (i, s, a, b, c['top2_logit_gap'][s]))
            break
    else:
        if len(o) != len(c['tokens']): bad += 1; msgs.append('case %d: %d tokens' % (i, len(o)))
print('; '.join(msgs) if msgs else 'all %d cases equal' % len(m['cases']))
sys.exit(1 if bad else 0)
PY
field() { python3 -c "import json,sys; g=json.load(open('$G')); m=[x for x in g['models'] if x['name']==sys.argv[1] and x['type']==sys.argv[2]][0]; print(eval(sys.argv[3]))" "$@"; }
run_cases() { # FILE NAME TYPE
    local i=0
    for ids in $(field "$2" "$3" "'\n'.join(','.join(map(str, c['prompt_ids'])) for c in m['cases'])"); do
        "$CALDRIX" run "$1" --prompt-ids "$ids" -n 16 --temp 0 --ignore-eos --json --top-logits 8 --threads 1 \
            >"$tmp/o.json$i" 2>"$tmp/err" || { cat "$tmp/err"; return 1; }
        i=$((i+1))
    done
}
sha() { python3 -c "import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())" "$1"; }

for m in $(python3 -c "import json; print(' '.join(sorted(set(x['name'] for x in json.load(open('$G'))['models']))))"); do
    over=$(field "$m" F32 "json.dumps(m['config'])")
    if ! python3 scripts/goldens/tiny_fixtures.py "$m" "$tmp/$m" "$over"; then bad "$m: the fixture is written"; continue; fi
    f32="$tmp/$m-F32.gguf"
    types=$(python3 -c "import json; print(' '.join(x['type'] for x in json.load(open('$G'))['models'] if x['name'] == '$m'))")
    if ! "$CALDRIX" convert "$tmp/$m" "$f32" --type F32 --name tiny-random 2>"$tmp/conv"; then
        bad "$m: convert"; cat "$tmp/conv"; continue
    fi
    for t in $types; do
        [ "$t" = F32 ] || "$CALDRIX" quantize "$f32" "$tmp/$m-$t.gguf" "$t" >/dev/null 2>>"$tmp/conv" || bad "$m: quantize to $t"
    done
    # caldrix on the F32 file and on the checkpoint: the same tokens
    if [ "$m" = bitnet ]; then
        echo "# bitnet: the F32 file is the checkpoint without int8 activations (tests/model/test_families_c.c)"
    elif run_cases "$f32" "$m" F32 && for i in 0 1 2; do mv "$tmp/o.json$i" "$tmp/g.json$i"; done &&
       run_cases "$tmp/$m" "$m" F32 &&
       python3 -c "import json,sys; sys.exit(any(json.load(open('$tmp/g.json%d' % i))['tokens'] != json.load(open('$tmp/o.json%d' % i))['tokens'] for i in range(3)))"; then
        ok "$m: caldrix's tokens on the converted F32 file are its tokens on the checkpoint (3 cases)"
    else bad "$m: caldrix's tokens on the converted F32 file and on the checkpoint"; fi
    for t in $types; do
        f="$tmp/$m-$t.gguf"
        if [ "$(sha "$f")" != "$(field "$m" "$t" "m['sha256']")" ]; then
            bad "$m $t: the file is the one llama.cpp's tokens were made on (sha256 $(sha "$f"))"; continue
        fi
        if run_cases "$f" "$m" "$t" && r=$(python3 "$tmp/cmp.py" "$G" "$m" "$t" "$tmp/o.json"); then
            q=$(field "$m" "$t" "{True: ', tensors as llama.cpp quantizes them', False: ', TENSORS NOT llama.cpp QUANTIZER', None: ''}[m.get('tensors_equal_llamacpp_quantizer')]")
            ok "$m $t ($over): llama.cpp's greedy tokens on the same file ($r$q)"
        else bad "$m $t: llama.cpp's greedy tokens (${r:-run failed})"; fi
    done
done

# GPT-OSS's GGUF experts are the file's (a checkpoint's are transposed copies): a weight budget streams them,
# at the minimum the refusal of a 1-byte budget names, with the resident run's tokens and top-5 logits exactly
for t in F32 MXFP4_MOE; do
    f="$tmp/gpt_oss-$t.gguf"
    [ -s "$f" ] || { bad "gpt_oss $t: no file for the budget check"; continue; }
    min=$("$CALDRIX" run "$f" --prompt-ids 1,2 -n 1 --weight-budget 1 2>&1 >/dev/null | sed -n 's/.*one token needs: [^(]*(\([0-9]*\) bytes.*/\1/p')
    "$CALDRIX" run "$f" --prompt-ids 5,6,7,8,9,10,11,12,13,14 -n 16 --temp 0 --ignore-eos --json --top-logits 5 >"$tmp/res.json" 2>/dev/null
    "$CALDRIX" run "$f" --prompt-ids 5,6,7,8,9,10,11,12,13,14 -n 16 --temp 0 --ignore-eos --json --top-logits 5 \
        --weight-budget "${min:-1}" >"$tmp/bud.json" 2>"$tmp/bud.err"
    if [ -n "$min" ] && python3 -c "
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
sys.exit(0 if a['tokens'] == b['tokens'] and len(a['tokens']) == 16 and [s['top'] for s in a['steps']] == [s['top'] for s in b['steps']] else 1)" "$tmp/res.json" "$tmp/bud.json"; then
        ok "gpt_oss $t: under --weight-budget $min (the minimum) the tokens and top-5 logits equal the resident run's"
    else bad "gpt_oss $t: --weight-budget ${min:-?} ($(tail -c 300 "$tmp/bud.err"))"; fi
done

# a gpt-oss file without attention.sliding_window (the key renamed in place): refused, as llama.cpp refuses it
python3 -c "
import sys
b = open(sys.argv[1], 'rb').read(); k = b'gpt-oss.attention.sliding_window'
assert b.count(k) == 1
open(sys.argv[2], 'wb').write(b.replace(k, k[:-1] + b'x'))" "$tmp/gpt_oss-F32.gguf" "$tmp/nowin.gguf"
"$CALDRIX" run "$tmp/nowin.gguf" --prompt-ids 1,2 -n 1 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -ne 0 ] && grep -q "gpt-oss.attention.sliding_window is missing; the gpt-oss architecture needs it" "$tmp/err"; then
    ok "gpt_oss: a GGUF file without attention.sliding_window is refused by name"
else bad "gpt_oss: a GGUF file without attention.sliding_window (rc $rc: $(cat "$tmp/err"))"; fi

# GPT-OSS: what a gpt-oss GGUF cannot say is refused by name
python3 scripts/goldens/tiny_fixtures.py gpt_oss "$tmp/lim" '{"swiglu_limit": 0.5}'
"$CALDRIX" convert "$tmp/lim" "$tmp/lim.gguf" --type F32 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -ne 0 ] && grep -q "swiglu_limit 0.5, alpha 1.702; GGUF \"gpt-oss\" has no key" "$tmp/err" && [ ! -s "$tmp/lim.gguf" ]; then
    ok "gpt_oss: convert refuses swiglu_limit 0.5 (llama.cpp's clamp is 7, no key)"
else bad "gpt_oss: swiglu_limit 0.5 (rc $rc: $(cat "$tmp/err"))"; fi
python3 scripts/goldens/tiny_fixtures.py gpt_oss "$tmp/full1" '{"layer_types": ["full_attention", "sliding_attention"]}'
"$CALDRIX" convert "$tmp/full1" "$tmp/full1.gguf" --type F32 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -ne 0 ] && grep -q "the sliding layers (layer_types) do not repeat with a period" "$tmp/err"; then
    ok "gpt_oss: convert refuses a full-attention layer 0 (no period says it)"
else bad "gpt_oss: full-attention layer 0 (rc $rc: $(cat "$tmp/err"))"; fi
python3 scripts/goldens/tiny_fixtures.py gpt_oss "$tmp/p4" '{"num_hidden_layers": 4, "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]}'
if "$CALDRIX" convert "$tmp/p4" "$tmp/p4.gguf" --type F32 >/dev/null 2>"$tmp/err" &&
   "$CALDRIX" inspect "$tmp/p4.gguf" --json >"$tmp/p4.json" 2>/dev/null &&
   python3 -c "
import struct,sys
b=open('$tmp/p4.gguf','rb').read(); k=b'gpt-oss.attention.sliding_window_pattern'; i=b.find(k)
sys.exit(not (i > 0 and struct.unpack_from('<II', b, i + len(k)) == (4, 4)))" &&
   "$CALDRIX" run "$tmp/p4" --prompt-ids 5,6,7,8,9,10,11,12,13,14,15,16 -n 8 --temp 0 --ignore-eos --json >"$tmp/a.json" 2>/dev/null &&
   "$CALDRIX" run "$tmp/p4.gguf" --prompt-ids 5,6,7,8,9,10,11,12,13,14,15,16 -n 8 --temp 0 --ignore-eos --json >"$tmp/b.json" 2>/dev/null &&
   python3 -c "import json,sys; sys.exit(json.load(open('$tmp/a.json'))['tokens'] != json.load(open('$tmp/b.json'))['tokens'])"; then
    ok "gpt_oss: 3 sliding layers of 4 are written as attention.sliding_window_pattern 4 and read back (the checkpoint's tokens)"
else bad "gpt_oss: sliding_window_pattern 4 ($(cat "$tmp/err"))"; fi

python3 scripts/goldens/tiny_fixtures.py gpt_oss "$tmp/nw" '{"layer_types": ["full_attention", "full_attention"]}'
if "$CALDRIX" convert "$tmp/nw" "$tmp/nw.gguf" --type F32 >/dev/null 2>"$tmp/err" &&
   python3 -c "
import struct,sys
b=open('$tmp/nw.gguf','rb').read(); k=b'gpt-oss.attention.sliding_window'; i=b.find(k)
sys.exit(not (i > 0 and struct.unpack_from('<II', b, i + len(k)) == (4, 0)))" &&
   "$CALDRIX" run "$tmp/nw" --prompt-ids 5,6,7,8,9,10,11,12,13,14,15 -n 12 --temp 0 --ignore-eos --json >"$tmp/a.json" 2>/dev/null &&
   "$CALDRIX" run "$tmp/nw.gguf" --prompt-ids 5,6,7,8,9,10,11,12,13,14,15 -n 12 --temp 0 --ignore-eos --json >"$tmp/b.json" 2>/dev/null &&
   python3 -c "import json,sys; sys.exit(json.load(open('$tmp/a.json'))['tokens'] != json.load(open('$tmp/b.json'))['tokens'])"; then
    ok "gpt_oss: no sliding layer is written as attention.sliding_window 0 and read back (the checkpoint's tokens)"
else bad "gpt_oss: no sliding layer ($(cat "$tmp/err"))"; fi

echo "families_c_gguf: $pass passed, $fail failed"
[ $fail -eq 0 ]
