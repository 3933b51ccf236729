#!/usr/bin/env bash
# The families without a fixture in ../shared (OLMo) as GGUF: scripts/goldens/tiny_fixtures.py writes each
# tiny checkpoint, `caldrix convert` (F32, general.name tiny-random) and `caldrix quantize` to Q8_0 give the
# files whose sha256 tests/golden/families-c-llamacpp.json pins, and caldrix's 16 greedy tokens on each
# equal llama.cpp's on the same file (node-llama-cpp 3.21.1, scripts/goldens/llamacpp-families-c.mjs); a
# step whose llama.cpp top-two gap is under 0.02 ends the comparison of its case (said).
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
    f32="$tmp/$m-F32.gguf"; q8="$tmp/$m-Q8_0.gguf"
    if ! "$CALDRIX" convert "$tmp/$m" "$f32" --type F32 --name tiny-random 2>"$tmp/conv" ||
       ! "$CALDRIX" quantize "$f32" "$q8" Q8_0 >/dev/null 2>>"$tmp/conv"; then
        bad "$m: convert and quantize"; cat "$tmp/conv"; continue
    fi
    for t in F32 Q8_0; do
        f="$tmp/$m-$t.gguf"
        if [ "$(sha "$f")" != "$(field "$m" "$t" "m['sha256']")" ]; then
            bad "$m $t: the file is the one llama.cpp's tokens were made on (sha256 $(sha "$f"))"; continue
        fi
        if run_cases "$f" "$m" "$t" && r=$(python3 "$tmp/cmp.py" "$G" "$m" "$t" "$tmp/o.json"); then
            ok "$m $t ($over): llama.cpp's greedy tokens on the same file ($r)"
        else bad "$m $t: llama.cpp's greedy tokens (${r:-run failed})"; fi
    done
done

echo "families_c_gguf: $pass passed, $fail failed"
[ $fail -eq 0 ]
