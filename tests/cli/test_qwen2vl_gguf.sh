#!/usr/bin/env bash
# Qwen2-VL and Qwen2.5-VL (their text path) as GGUF: scripts/goldens/tiny_fixtures.py writes each tiny checkpoint,
# `caldrix convert` (F32, general.name tiny-random: llama.cpp's "qwen2vl" with rope.dimension_sections) and
# `caldrix quantize` to Q8_0 give the files whose sha256 tests/golden/qwen2vl-llamacpp.json pins, and caldrix's 16
# greedy tokens on each equal llama.cpp's on the same file (node-llama-cpp 3.21.1,
# scripts/goldens/llamacpp-qwen2vl.mjs; llama.cpp gives text tokens the positions p, p, p, 0); a step whose llama.cpp
# top-two gap is under 0.02 ends the comparison of its case (said). caldrix's tokens on the F32 file also equal its
# own on the checkpoint (whose path tests/model/test_qwen2vl.c checks against PyTorch). A qwen2vl file without
# rope.dimension_sections is refused by name (llama.cpp's qwen2vl requires the key), and an image on the command
# line is refused naming why.
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
G=tests/golden/qwen2vl-llamacpp.json

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
        "$CALDRIX" run "$1" --prompt-ids "$ids" -n 16 --temp 0 --ignore-eos --json --threads 1 \
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
    if run_cases "$f32" "$m" F32 && for i in 0 1 2; do mv "$tmp/o.json$i" "$tmp/g.json$i"; done &&
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
            ok "$m $t: llama.cpp's greedy tokens on the same file ($r)"
        else bad "$m $t: llama.cpp's greedy tokens (${r:-run failed})"; fi
    done
done

# a qwen2vl file without rope.dimension_sections (the key renamed in place): refused by name
python3 -c "
import sys
b = open(sys.argv[1], 'rb').read(); k = b'qwen2vl.rope.dimension_sections'
assert b.count(k) == 1
open(sys.argv[2], 'wb').write(b.replace(k, k[:-1] + b'x'))" "$tmp/qwen2_vl-F32.gguf" "$tmp/nosec.gguf"
"$CALDRIX" run "$tmp/nosec.gguf" --prompt-ids 1,2 -n 1 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -ne 0 ] && grep -q "qwen2vl.rope.dimension_sections is missing; the qwen2vl architecture needs 4 section sizes" "$tmp/err"; then
    ok "qwen2vl: a GGUF file without rope.dimension_sections is refused by name"
else bad "qwen2vl: a GGUF file without rope.dimension_sections (rc $rc: $(cat "$tmp/err"))"; fi

# inspect says the vision tower is skipped; an image is refused naming why
"$CALDRIX" inspect "$tmp/qwen2_vl" >"$tmp/insp" 2>&1
if grep -q "family=qwen2_vl" "$tmp/insp" && grep -q "unused_tensors=none" "$tmp/insp" &&
   grep -q "note: caldrix runs Qwen2-VL's text path only; its vision tower is not computed: its 6 vision-tower tensors are skipped unread" "$tmp/insp"; then
    ok "qwen2_vl: inspect names the vision tower skipped, no tensor left unused"
else bad "qwen2_vl: inspect ($(cat "$tmp/insp"))"; fi
"$CALDRIX" inspect "$tmp/qwen2_vl-F32.gguf" --json >"$tmp/insp.json" 2>&1
if python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d['family'] == 'qwen2_vl' and d['missing_required_tensors'] == 'none' and 'requests with images are refused' in d['note']))" "$tmp/insp.json"; then
    ok "qwen2vl GGUF: inspect maps every tensor and notes that images are refused"
else bad "qwen2vl GGUF: inspect ($(cat "$tmp/insp.json"))"; fi
python3 -c "
import struct, zlib
def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
raw = b''.join(b'\x00' + b'\x80\x40\x20' * 8 for _ in range(8))
open('$tmp/x.png', 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 8, 8, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))"
"$CALDRIX" run "$tmp/qwen2_vl" --prompt-ids 5,6,7 --image "$tmp/x.png" -n 2 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -ne 0 ] && grep -q "vision tower is not computed" "$tmp/err"; then
    ok "qwen2_vl: run with an image is refused naming why ($(head -c 200 "$tmp/err"))"
else bad "qwen2_vl: run with an image (rc $rc: $(cat "$tmp/err"))"; fi

echo "qwen2vl_gguf: $pass passed, $fail failed"
[ $fail -eq 0 ]
