#!/usr/bin/env bash
# Gemma, Gemma 2, Gemma 3 as GGUF: `caldrix convert` of each fixture (../shared/fixtures/hf/NAME) and
# `caldrix quantize` of it to Q8_0 give the files whose sha256 tests/golden/gemma-llamacpp.json pins,
# and caldrix's 16 greedy tokens on each equal llama.cpp's on the same file (node-llama-cpp 3.21.1,
# scripts/goldens/llamacpp-gemma.mjs). On a GGUF file caldrix computes GELU as llama.cpp does (ggml's
# f16 table); a step whose llama.cpp top-two gap is under 0.02 ends the comparison of its case (said).
# The converted F32 files also keep PyTorch's golden tokens, their top-5 logits within 1e-2 (the f16
# GELU moves them by up to ~6e-3, as INDEX.md measured for llama.cpp), and carry llama.cpp's keys.
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
HF=../shared/fixtures/hf
G=tests/golden/gemma-llamacpp.json

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
run_cases() { # FILE NAME TYPE
    local i=0
    for ids in $(python3 -c "import json,sys; g=json.load(open('$G')); [print(','.join(map(str,c['prompt_ids']))) for c in [m for m in g['models'] if m['name']=='$2' and m['type']=='$3'][0]['cases']]"); do
        "$CALDRIX" run "$1" --prompt-ids "$ids" -n 16 --temp 0 --ignore-eos --json --top-logits 8 --threads 1 \
            >"$tmp/o.json$i" 2>"$tmp/err" || { cat "$tmp/err"; return 1; }
        i=$((i+1))
    done
}
sha() { python3 -c "import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())" "$1"; }
pinned() { python3 -c "import json; g=json.load(open('$G')); print([m for m in g['models'] if m['name']=='$1' and m['type']=='$2'][0]['sha256'])"; }

for m in gemma gemma2 gemma3; do
    f32="$tmp/$m-F32.gguf"; q8="$tmp/$m-Q8_0.gguf"
    if ! "$CALDRIX" convert $HF/$m "$f32" --type F32 2>"$tmp/conv" || ! "$CALDRIX" quantize "$f32" "$q8" Q8_0 >/dev/null 2>>"$tmp/conv"; then
        bad "$m: convert and quantize"; cat "$tmp/conv"; continue
    fi
    for t in F32 Q8_0; do
        f="$tmp/$m-$t.gguf"
        if [ "$(sha "$f")" != "$(pinned $m $t)" ]; then
            bad "$m $t: the file is the one llama.cpp's tokens were made on (sha256 $(sha "$f"))"; continue
        fi
        if run_cases "$f" $m $t && r=$(python3 "$tmp/cmp.py" "$G" $m $t "$tmp/o.json"); then
            ok "$m $t: llama.cpp's greedy tokens on the same file ($r)"
        else bad "$m $t: llama.cpp's greedy tokens (${r:-run failed})"; fi
    done
    # PyTorch's goldens through the F32 file: the converter's +1 on the norms, llama.cpp's keys read back
    i=0; ok_g=1
    for ids in $(python3 -c "import json; [print(','.join(map(str,c['prompt_ids']))) for c in json.load(open('$HF/$m/golden.json'))['cases']]"); do
        "$CALDRIX" run "$f32" --prompt-ids "$ids" -n 16 --temp 0 --ignore-eos --json --top-logits 8 --threads 1 >"$tmp/p.json$i" 2>/dev/null || ok_g=0
        i=$((i+1))
    done
    if [ $ok_g = 1 ] && python3 - "$HF/$m/golden.json" "$tmp/p.json" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))['cases']; worst = 0
for i, c in enumerate(cases):
    o = json.load(open(sys.argv[2] + str(i)))
    assert o['tokens'] == c['tokens'], ('case', i, o['tokens'], c['tokens'])
    for st, gs in zip(o['steps'], c['steps']):
        top = dict((t, l) for t, l in st['top'])
        for gid, gl in gs['top']:
            worst = max(worst, abs(top[gid] - gl))
assert worst <= 1e-2, worst
PY
    then ok "$m: the converted F32 file keeps PyTorch's goldens (tokens, top-5 logits within 1e-2)"
    else bad "$m: the converted F32 file keeps PyTorch's goldens"; fi
done

# llama.cpp's keys (gguf-py's names) in the converted files
python3 - "$tmp" <<'PY' && ok "the files carry llama.cpp's Gemma keys (softcaps, window, rope.freq_base_swa) and norms + 1" || bad "the files carry llama.cpp's Gemma keys"
import struct, sys
def kv(path):
    d = open(path, 'rb').read(); o = [8]
    def u(f):
        v = struct.unpack_from('<' + f, d, o[0])[0]; o[0] += struct.calcsize('<' + f); return v
    def s():
        n = u('Q'); v = d[o[0]:o[0] + n]; o[0] += n; return v.decode()
    def val(t):
        if t == 8: return s()
        if t == 9:
            et = u('I'); n = u('Q'); return [val(et) for _ in range(n)]
        return u({0:'B',1:'b',2:'H',3:'h',4:'I',5:'i',6:'f',7:'?',10:'Q',11:'q',12:'d'}[t])
    nt = u('Q'); nk = u('Q'); r = {}
    for _ in range(nk):
        k = s(); r[k] = val(u('I'))
    return r, d
t = sys.argv[1]
g1, _ = kv(t + '/gemma-F32.gguf'); g2, d2 = kv(t + '/gemma2-F32.gguf'); g3, _ = kv(t + '/gemma3-F32.gguf')
assert g1['general.architecture'] == 'gemma' and g1['gemma.attention.key_length'] == 32
assert g2['gemma2.attn_logit_softcapping'] == 20.0 and g2['gemma2.final_logit_softcapping'] == 15.0
assert g2['gemma2.attention.sliding_window'] == 8 and 'gemma2.attention.sliding_window_pattern' not in g2
assert g3['gemma3.attention.sliding_window'] == 8 and g3['gemma3.rope.freq_base_swa'] == 10000.0
assert g3['gemma3.rope.freq_base'] == 1e6 and 'gemma3.attn_logit_softcapping' not in g3
assert b'blk.0.post_attention_norm.weight' in d2 and b'blk.0.post_ffw_norm.weight' in d2 and struct.pack('<Q', 13) + b'output.weight' not in d2
PY

echo "gemma_gguf: $pass passed, $fail failed"
[ $fail -eq 0 ]
