#!/usr/bin/env bash
# Encoders as GGUF (llama.cpp's "bert"): `caldrix convert` writes the BERT and XLM-R fixtures of
# ../shared/fixtures/embed with <arch>.pooling_type from 1_Pooling (llama.cpp's LLAMA_POOLING_TYPE: mean 1,
# cls 2, last 3) and the WordPiece vocabulary as llama.cpp's "bert" model; caldrix on those files gives
# the PyTorch goldens (README.md's tolerance) for every input sentence-transformers does not truncate
# (GGUF keeps the positions, not max_seq_length), from the text through the file's own tokenizer; and
# llama.cpp's pooled vectors on the same files (tests/golden/embed-llamacpp.json, node-llama-cpp 3.21.1
# createEmbeddingContext, scripts/goldens/llamacpp-embed.mjs) within 1e-3·max(1, ‖v‖): llama.cpp is
# itself 2.7e-4..3.5e-3 from PyTorch (ggml's GELU is the tanh form read from an f16 table, the fixtures'
# is erf), while pooling by the wrong token moves a vector by > 0.2. A pooling_type caldrix does not
# compute (none 0, rank 4) is refused by name; max pooling has no llama.cpp type and is not converted.
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
E=../shared/fixtures/embed
L=tests/golden/embed-llamacpp.json
sha() { python3 -c "import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())" "$1"; }

cat >"$tmp/cmp.py" <<'PY'
import json, math, sys, subprocess
caldrix, fx, gguf, mode, lfile = sys.argv[1:6]
g = json.load(open(f'../shared/fixtures/embed/{fx}/golden.json'))
norm = g['pipeline']['normalize']
ins = [i for i in g['inputs'] if not i['truncated']]
args = [caldrix, 'embed', gguf, '--json']
for i in ins:
    args += ['-p', i['text']] if mode == 'text' else ['--ids', ','.join(map(str, i['input_ids']))]
o = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
want_pool = g['pipeline'].get('pooling', None)
worst = 0
if mode == 'llama':
    lm = [m for m in json.load(open(lfile))['models'] if m['name'] == fx][0]
    ref = {i['name']: i['pooled'] for i in lm['inputs']}
for gi, oi in zip(ins, o['data']):
    if mode == 'llama':
        want = ref[gi['name']]
        if norm:
            n = math.sqrt(sum(x * x for x in want)); want = [x / n for x in want]
        n = math.sqrt(sum(x * x for x in want)); tol = 1e-3 * max(1.0, n)
    else:
        want = gi['embedding']; n = math.sqrt(sum(x * x for x in want))
        tol = 1e-4 if norm else 1e-4 * max(1.0, n)
        assert oi['tokens'] == gi['token_count'], (gi['name'], oi['tokens'], gi['token_count'])
    d = max(abs(a - b) for a, b in zip(want, oi['embedding']))
    assert d <= tol, (gi['name'], d, tol)
    worst = max(worst, d / tol)
print('%d inputs, pooling %s, normalize %s, worst %.2g of the tolerance' % (len(ins), o['pooling'], o['normalize'], worst))
PY

for fx in bert_mean bert_cls; do
    f="$tmp/$fx.gguf"
    if ! "$CALDRIX" convert "$E/$fx" "$f" --type F32 >/dev/null 2>"$tmp/conv"; then bad "$fx: convert"; cat "$tmp/conv"; continue; fi
    want=$(python3 -c "import json; print([m['sha256'] for m in json.load(open('$L'))['models'] if m['name'] == '$fx'][0])")
    check "$fx: the converted file is the one llama.cpp's vectors were made on" '[ "$(sha "$f")" = "$want" ]'
    r=$(python3 "$tmp/cmp.py" "$CALDRIX" "$fx" "$f" text "$L" 2>&1)
    check "$fx GGUF: texts through the file's tokenizer give PyTorch's vectors ($r)" '[ $? -eq 0 ]'
    r=$(python3 "$tmp/cmp.py" "$CALDRIX" "$fx" "$f" llama "$L" 2>&1)
    check "$fx GGUF: the golden ids give llama.cpp's vectors on the same file ($r)" '[ $? -eq 0 ]'
done
"$CALDRIX" embed "$tmp/bert_mean.gguf" -p hello --json >"$tmp/m.json" 2>"$tmp/err"
check "bert_mean GGUF: pooled by mean, as its pooling_type 1 says, without Normalize" \
    'grep -q "\"pooling\": *\"mean\"" "$tmp/m.json" && grep -q "\"normalize\": *false" "$tmp/m.json"'

"$CALDRIX" convert "$E/xlmr_cls" "$tmp/x.gguf" --type F32 >/dev/null 2>&1
r=$(python3 "$tmp/cmp.py" "$CALDRIX" xlmr_cls "$tmp/x.gguf" ids "$L" 2>&1)
check "xlmr_cls GGUF (positions after pad_token_id + 1 kept): the golden ids give PyTorch's vectors ($r)" '[ $? -eq 0 ]'

# pooling_type rewritten in place (a u32 after its key and type)
setpool() { python3 - "$1" "$2" "$3" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read()); k = b'bert.pooling_type'; i = b.index(k) + len(k)
assert struct.unpack_from('<I', b, i)[0] == 4
struct.pack_into('<I', b, i + 4, int(sys.argv[3])); open(sys.argv[2], 'wb').write(b)
PY
}
setpool "$tmp/bert_mean.gguf" "$tmp/cls.gguf" 2
"$CALDRIX" embed "$tmp/cls.gguf" -p hello --json >"$tmp/c.json" 2>"$tmp/err"
"$CALDRIX" embed "$tmp/bert_mean.gguf" -p hello >"$tmp/mv" 2>>"$tmp/err"
"$CALDRIX" embed "$tmp/cls.gguf" -p hello >"$tmp/cv" 2>>"$tmp/err"
check "pooling_type 2 on the same weights pools by CLS (another vector)" \
    'grep -q "\"pooling\": *\"cls\"" "$tmp/c.json" && ! cmp -s "$tmp/mv" "$tmp/cv"'
for v in 0 4; do
    setpool "$tmp/bert_mean.gguf" "$tmp/p$v.gguf" $v
    "$CALDRIX" embed "$tmp/p$v.gguf" -p hello >/dev/null 2>"$tmp/err"; rc=$?
    check "pooling_type $v is refused by name" '[ $rc -eq 1 ] && grep -q "pooling_type is $v" "$tmp/err"'
done
setpool "$tmp/bert_mean.gguf" "$tmp/p9.gguf" 9
"$CALDRIX" embed "$tmp/p9.gguf" -p hello >/dev/null 2>"$tmp/err"; rc=$?
check "pooling_type 9 (no such type) is refused" '[ $rc -eq 1 ] && grep -q "pooling_type" "$tmp/err"'

python3 -c "import sys; b = open(sys.argv[1], 'rb').read(); open(sys.argv[2], 'wb').write(b.replace(b'bert.pooling_type', b'bert.pooling_typx'))" \
    "$tmp/bert_mean.gguf" "$tmp/nokey.gguf"
"$CALDRIX" embed "$tmp/nokey.gguf" -p hello >/dev/null 2>"$tmp/err"; rc=$?
check "no pooling_type key: refused, never guessed" '[ $rc -eq 1 ] && grep -q "pooling_type is missing" "$tmp/err"'
mkdir -p "$tmp/maxp/1_Pooling" && cp "$E/bert_mean"/*.json "$E/bert_mean"/*.txt "$E/bert_mean/model.safetensors" "$tmp/maxp/"
sed 's/"pooling_mode_mean_tokens": true/"pooling_mode_mean_tokens": false/; s/"pooling_mode_max_tokens": false/"pooling_mode_max_tokens": true/' \
    "$E/bert_mean/1_Pooling/config.json" >"$tmp/maxp/1_Pooling/config.json"
"$CALDRIX" convert "$tmp/maxp" "$tmp/maxp.gguf" >/dev/null 2>"$tmp/err"; rc=$?
check "max pooling (no llama.cpp pooling_type) is not converted" '[ $rc -ne 0 ] && grep -q "pooling max" "$tmp/err"'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
