#!/usr/bin/env bash
# Qwen3 rerank and embedding decoders as GGUF, the way llama.cpp's converter writes them
# (conversion/qwen.py Qwen3Model, base.py _try_set_pooling_type) and llama.cpp reads them (rank pooling:
# softmax over cls.output · h_last; last pooling: the last token's hidden state).
#   - `caldrix convert --task rerank --yes-id 269 --no-id 104` on ../shared/fixtures/embed/qwen3_rerank writes
#     pooling_type 4, classifier.output_labels [yes, no], the rerank template and cls.output.weight = the tied
#     head's [yes; no] rows; caldrix reads it as a reranker and gives the HF folder's scores bit for bit, the
#     PyTorch golden within the fixture README's 1e-4 and its ranking exactly, and llama.cpp's scores on the
#     same file (tests/golden/rerank-llamacpp.json: node-llama-cpp 3.21.1 createRankingContext,
#     scripts/goldens/llamacpp-rerank.mjs) within 1e-4 with the same ranking. Measured: caldrix-llama.cpp
#     <= 1e-6, llama.cpp-PyTorch 2.6e-6 (f32 sums in other orders); the smallest listed mistake (yes/no
#     swapped) moves a score by 0.57 — and the file converted with the ids swapped is shown to fail.
#   - qwen3_embed (modules.json: lasttoken + Normalize) converts with pooling_type 3 and
#     caldrix.embedding.normalize; caldrix's vectors are the PyTorch golden's within 1e-4 and llama.cpp's
#     createEmbeddingContext vectors (normalized here; llama.cpp returns them raw) within 1e-4.
#   - an untied reranker (lm_head.weight of its own): cls.output from lm_head, no output.weight; same bits
#     as its folder. Bad files and options are refused by name.
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
E=../shared/fixtures/embed
L=tests/golden/rerank-llamacpp.json
sha() { python3 -c "import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())" "$1"; }
want_sha() { python3 -c "import json,sys; print([m['sha256'] for m in json.load(open('$L'))['models'] if m['name'] == sys.argv[1]][0])" "$1"; }
pairs=$(python3 -c "import json; print(' '.join('--pair-ids ' + ','.join(map(str, d['input_ids'])) for d in json.load(open('$E/qwen3_rerank/golden.json'))['documents']))")

# ---- qwen3_rerank ----
R="$tmp/rr.gguf"
"$CALDRIX" convert "$E/qwen3_rerank" "$R" --type F32 --task rerank --yes-id 269 --no-id 104 >/dev/null 2>"$tmp/err"
check "qwen3_rerank: convert --task rerank" '[ -s "$R" ]'
check "qwen3_rerank: the converted file is the one llama.cpp's scores were made on" '[ "$(sha "$R")" = "$(want_sha qwen3_rerank)" ]'
cat >"$tmp/meta.py" <<'PY'
import struct, sys
b = open(sys.argv[1], 'rb').read(); o = 8
def u32():
    global o; v = struct.unpack_from('<I', b, o)[0]; o += 4; return v
def u64():
    global o; v = struct.unpack_from('<Q', b, o)[0]; o += 8; return v
def s():
    global o; n = u64(); v = b[o:o + n].decode(); o += n; return v
size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def val(t):
    global o
    if t == 8: return s()
    if t == 9:
        et, n = u32(), u64(); return [val(et) for _ in range(n)]
    fmt = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}[t]
    v = struct.unpack_from('<' + fmt, b, o)[0]; o += size[t]; return v
nt, nk = u64(), u64()
kv = {}
for _ in range(nk):
    k = s(); kv[k] = val(u32())
ts = {}
for _ in range(nt):
    n = s(); nd = u32(); ne = [u64() for _ in range(nd)]; ts[n] = (ne, u32(), u64())
for k in sys.argv[2:]:
    print(k, repr(kv.get(k, ts.get(k))))
PY
python3 "$tmp/meta.py" "$R" qwen3.pooling_type qwen3.classifier.output_labels tokenizer.chat_templates cls.output.weight output.weight >"$tmp/meta"
check "qwen3_rerank GGUF: pooling_type 4, labels [yes, no], a rerank template, cls.output [64 x 2], no output.weight" \
    'grep -qx "qwen3.pooling_type 4" "$tmp/meta" && grep -qx "qwen3.classifier.output_labels \[.yes., .no.\]" "$tmp/meta" &&
     grep -qx "tokenizer.chat_templates \[.rerank.\]" "$tmp/meta" && grep -q "^cls.output.weight (\[64, 2\], 0," "$tmp/meta" &&
     grep -qx "output.weight None" "$tmp/meta"'
python3 - "$R" "$E/qwen3_rerank/golden.json" >"$tmp/tpl" <<'PY'
import json, sys
b = open(sys.argv[1], 'rb').read(); g = json.load(open(sys.argv[2]))
t = g['template']
want = (t['prefix_text'] + t['middle_text'].replace('{instruction}', t['default_instruction']).replace('{doc}', '{document}') + t['suffix_text'])
print('yes' if want.encode() in b else 'no')
PY
check "qwen3_rerank GGUF: tokenizer.chat_template.rerank is the model card's template with {query} and {document}" \
    '[ "$(cat "$tmp/tpl")" = yes ]'

"$CALDRIX" rerank "$R" $pairs >"$tmp/gguf.txt" 2>"$tmp/err"
check "caldrix rerank on the GGUF: the task comes from the file (pooling_type 4), no --yes-id needed" '[ -s "$tmp/gguf.txt" ]'
"$CALDRIX" rerank "$E/qwen3_rerank" $pairs --yes-id 269 --no-id 104 >"$tmp/hf.txt" 2>>"$tmp/err"
check "qwen3_rerank: GGUF scores are the HF folder's bit for bit (cls.output rows = the tied head's rows)" \
    'cmp -s "$tmp/gguf.txt" "$tmp/hf.txt"'

cat >"$tmp/cmp.py" <<'PY'
import json, subprocess, sys
caldrix, gguf, ref, lfile = sys.argv[1:5]
g = json.load(open('../shared/fixtures/embed/qwen3_rerank/golden.json'))
args = [caldrix, 'rerank', gguf, '--json']
for d in g['documents']:
    args += ['--pair-ids', ','.join(map(str, d['input_ids']))]
o = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)['results']
got = {r['index']: r['relevance_score'] for r in o}
if ref == 'torch':
    want = [d['score'] for d in g['documents']]
    rank = g['ranking_by_score']
else:
    lm = [m for m in json.load(open(lfile))['models'] if m['name'] == 'qwen3_rerank'][0]
    want = [d['score'] for d in lm['documents']]
    rank = [lm['documents'][i]['name'] for i in sorted(range(len(want)), key=lambda i: -want[i])]
worst = max(abs(got[i] - w) for i, w in enumerate(want))
assert worst <= 1e-4, ('score', worst)
names = [g['documents'][r['index']]['name'] for r in o]
assert names == rank, (names, rank)
print('%d pairs, worst %.2g (tolerance 1e-4), ranking %s' % (len(want), worst, ' '.join(names)))
PY
r=$(python3 "$tmp/cmp.py" "$CALDRIX" "$R" torch "$L" 2>&1)
check "qwen3_rerank GGUF: PyTorch's scores within 1e-4, ranking exact ($r)" '[ $? -eq 0 ]'
r=$(python3 "$tmp/cmp.py" "$CALDRIX" "$R" llama "$L" 2>&1)
check "qwen3_rerank GGUF: llama.cpp's createRankingContext scores on the same file within 1e-4, same ranking ($r)" '[ $? -eq 0 ]'
"$CALDRIX" convert "$E/qwen3_rerank" "$tmp/swap.gguf" --type F32 --task rerank --yes-id 104 --no-id 269 >/dev/null 2>&1
r=$(python3 "$tmp/cmp.py" "$CALDRIX" "$tmp/swap.gguf" llama "$L" 2>&1); rc=$?
check "the comparison can fail: yes/no swapped at conversion is refused by it ($(echo "$r" | tail -1))" '[ $rc -ne 0 ]'

# batched = alone, bit for bit, on the GGUF
: >"$tmp/alone.txt"
for p in $(python3 -c "import json; print(' '.join(','.join(map(str, d['input_ids'])) for d in json.load(open('$E/qwen3_rerank/golden.json'))['documents']))"); do
    "$CALDRIX" rerank "$R" --pair-ids "$p" --threads 2 | awk '{print $2}' >>"$tmp/alone.txt"
done
awk '{print $1, $2}' "$tmp/gguf.txt" | sort -n | awk '{print $2}' >"$tmp/batched.txt"
check "qwen3_rerank GGUF: each pair alone (2 threads) gives the bits it gets in the batch (1 thread)" 'cmp -s "$tmp/alone.txt" "$tmp/batched.txt"'

"$CALDRIX" rerank "$R" $pairs --json >"$tmp/once.json" 2>/dev/null
"$CALDRIX" rerank "$R" $pairs --json --repeat 2 >"$tmp/rep.json" 2>/dev/null
check "rerank --repeat 2 --json: timings (repeat 2, best_ms, pairs_per_s) and the same results" \
    'python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); t=b.pop(\"timings\"); assert t[\"repeat\"] == 2 and t[\"best_ms\"] > 0 and abs(t[\"pairs_per_s\"] - 5e3 / t[\"best_ms\"]) < 1e-6 * t[\"pairs_per_s\"] and a == b" "$tmp/once.json" "$tmp/rep.json" &&
     "$CALDRIX" rerank --help | grep -q -- "--repeat N"'
"$CALDRIX" rerank "$R" $pairs --yes-id 1 --no-id 2 >/dev/null 2>"$tmp/err"; rc=$?
check "--yes-id on a rerank GGUF is refused: cls.output holds the answers" '[ $rc -ne 0 ] && grep -q "cls.output" "$tmp/err"'
"$CALDRIX" embed "$R" --ids 3,4,5 >/dev/null 2>"$tmp/err"; rc=$?
check "caldrix embed on a rerank GGUF is refused by its pooling_type" '[ $rc -ne 0 ] && grep -q "rank" "$tmp/err"'
python3 -c "import sys; b = open(sys.argv[1], 'rb').read(); open(sys.argv[2], 'wb').write(b.replace(b'cls.output.weight', b'cls.outpux.weight'))" "$R" "$tmp/nocls.gguf"
"$CALDRIX" rerank "$tmp/nocls.gguf" --pair-ids 3,4 >/dev/null 2>"$tmp/err"; rc=$?
check "pooling_type 4 without cls.output.weight is refused by name" '[ $rc -ne 0 ] && grep -q "needs tensor \"cls.output.weight\"" "$tmp/err"'
python3 -c "import sys; b = open(sys.argv[1], 'rb').read(); open(sys.argv[2], 'wb').write(b.replace(b'classifier.output_labels', b'classifier.output_labelz'))" "$R" "$tmp/nolab.gguf"
"$CALDRIX" rerank "$tmp/nolab.gguf" --pair-ids 3,4 >/dev/null 2>"$tmp/err"; rc=$?
check "pooling_type 4 without classifier.output_labels is refused by name" '[ $rc -ne 0 ] && grep -q "output_labels is missing" "$tmp/err"'
python3 -c "import sys; b = open(sys.argv[1], 'rb').read(); open(sys.argv[2], 'wb').write(b.replace(b'cls.output.weight', b'cls.outpux.weight').replace(b'qwen3.pooling_type', b'qwen3.pooling_typx').replace(b'classifier.output_labels', b'classifier.output_labelz'))" "$R" "$tmp/plain.gguf"
"$CALDRIX" rerank "$tmp/plain.gguf" --pair-ids 3,4 >/dev/null 2>"$tmp/err"; rc=$?
check "a cls.output.weight without pooling_type rank is refused as unused" '[ $rc -ne 0 ] && grep -q "cls.outpux.weight\" is not used" "$tmp/err"'

"$CALDRIX" convert "$E/qwen3_rerank" "$tmp/x.gguf" --task rerank >/dev/null 2>"$tmp/err"; rc=$?
check "convert --task rerank without a tokenizer and without ids is refused, naming --yes-id" '[ $rc -ne 0 ] && grep -q "yes-id" "$tmp/err"'
mkdir -p "$tmp/tokd" && cp "$E/qwen3_rerank"/* "$tmp/tokd/" && cp ../shared/fixtures/tokenizers/qwen3/tokenizer*.json "$tmp/tokd/"
"$CALDRIX" convert "$tmp/tokd" "$tmp/x.gguf" --task rerank >/dev/null 2>"$tmp/err"; rc=$?
check "convert --task rerank takes the tokenizer's \"yes\"/\"no\" (9693, 2152 in Qwen3; past this model's 320 rows: refused)" \
    '[ $rc -ne 0 ] && grep -q "ids are 9693 and 2152" "$tmp/err"'
"$CALDRIX" convert "$E/bert_cls" "$tmp/x.gguf" --task rerank --yes-id 1 --no-id 2 >/dev/null 2>"$tmp/err"; rc=$?
check "convert --task rerank of an encoder is refused" '[ $rc -ne 0 ] && grep -q "is an encoder" "$tmp/err"'
"$CALDRIX" convert "$E/qwen3_rerank" "$tmp/x.gguf" --yes-id 1 --no-id 2 >/dev/null 2>"$tmp/err"; rc=$?
check "--yes-id without --task rerank is refused" '[ $rc -eq 2 ]'

# untied: a reranker with an lm_head of its own
python3 - "$E/qwen3_rerank" "$tmp/untied" <<'PY'
import json, os, struct, sys, array
src, dst = sys.argv[1:3]; os.makedirs(dst)
b = open(src + '/model.safetensors', 'rb').read(); n = struct.unpack_from('<Q', b)[0]; h = json.loads(b[8:8 + n]); data = b[8 + n:]
meta = h.pop('__metadata__', {'format': 'pt'})
t = {k: data[v['data_offsets'][0]:v['data_offsets'][1]] for k, v in h.items()}
e = array.array('f', t['model.embed_tokens.weight'])
t['lm_head.weight'] = array.array('f', [x * 1.5 - 0.01 for x in e]).tobytes()
h['lm_head.weight'] = dict(h['model.embed_tokens.weight'])
hdr, off = {'__metadata__': meta}, 0
for k in sorted(t):
    hdr[k] = {'dtype': h[k]['dtype'], 'shape': h[k]['shape'], 'data_offsets': [off, off + len(t[k])]}; off += len(t[k])
hb = json.dumps(hdr).encode(); hb += b' ' * (-len(hb) % 8)
with open(dst + '/model.safetensors', 'wb') as f:
    f.write(struct.pack('<Q', len(hb))); f.write(hb)
    for k in sorted(t): f.write(t[k])
c = json.load(open(src + '/config.json')); c['tie_word_embeddings'] = False
json.dump(c, open(dst + '/config.json', 'w'))
PY
"$CALDRIX" convert "$tmp/untied" "$tmp/untied.gguf" --type F32 --task rerank --yes-id 269 --no-id 104 >/dev/null 2>"$tmp/err"
python3 "$tmp/meta.py" "$tmp/untied.gguf" cls.output.weight output.weight token_embd.weight >"$tmp/meta"
check "untied reranker: cls.output from lm_head, lm_head itself not written, token_embd kept" \
    'grep -q "^cls.output.weight (\[64, 2\]" "$tmp/meta" && grep -qx "output.weight None" "$tmp/meta" && grep -q "^token_embd.weight (\[64, 320\]" "$tmp/meta"'
"$CALDRIX" rerank "$tmp/untied.gguf" $pairs >"$tmp/u1.txt" 2>"$tmp/err"
"$CALDRIX" rerank "$tmp/untied" $pairs --yes-id 269 --no-id 104 >"$tmp/u2.txt" 2>>"$tmp/err"
check "untied reranker: GGUF scores are its folder's bit for bit, and not the tied model's" \
    '[ -s "$tmp/u1.txt" ] && cmp -s "$tmp/u1.txt" "$tmp/u2.txt" && ! cmp -s "$tmp/u1.txt" "$tmp/hf.txt"'

# ---- qwen3_embed ----
Q="$tmp/qe.gguf"
"$CALDRIX" convert "$E/qwen3_embed" "$Q" --type F32 >/dev/null 2>"$tmp/err"
check "qwen3_embed (no model. prefix): converted; the file is the one llama.cpp's vectors were made on" \
    '[ -s "$Q" ] && [ "$(sha "$Q")" = "$(want_sha qwen3_embed)" ]'
python3 "$tmp/meta.py" "$Q" qwen3.pooling_type caldrix.embedding.normalize token_embd.weight >"$tmp/meta"
check "qwen3_embed GGUF: pooling_type 3 (last) from 1_Pooling, caldrix.embedding.normalize from modules.json" \
    'grep -qx "qwen3.pooling_type 3" "$tmp/meta" && grep -qx "caldrix.embedding.normalize True" "$tmp/meta"'
cat >"$tmp/cmpe.py" <<'PY'
import json, math, subprocess, sys
caldrix, gguf, ref, lfile = sys.argv[1:5]
g = json.load(open('../shared/fixtures/embed/qwen3_embed/golden.json'))
args = [caldrix, 'embed', gguf, '--json']
for i in g['inputs']:
    args += ['--ids', ','.join(map(str, i['input_ids']))]
o = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
assert o['pooling'] == 'lasttoken' and o['normalize'] is True, (o['pooling'], o['normalize'])
if ref == 'llama':
    lm = {i['name']: i['pooled'] for i in [m for m in json.load(open(lfile))['models'] if m['name'] == 'qwen3_embed'][0]['inputs']}
worst = 0
for gi, oi in zip(g['inputs'], o['data']):
    want = gi['embedding'] if ref == 'torch' else lm[gi['name']]
    n = math.sqrt(sum(x * x for x in want)); want = [x / n for x in want]
    d = max(abs(a - b) for a, b in zip(want, oi['embedding']))
    assert d <= 1e-4, (gi['name'], d)
    worst = max(worst, d)
print('%d inputs, worst %.2g (tolerance 1e-4)' % (len(g['inputs']), worst))
PY
r=$(python3 "$tmp/cmpe.py" "$CALDRIX" "$Q" torch "$L" 2>&1)
check "qwen3_embed GGUF: PyTorch's normalized vectors within 1e-4 ($r)" '[ $? -eq 0 ]'
r=$(python3 "$tmp/cmpe.py" "$CALDRIX" "$Q" llama "$L" 2>&1)
check "qwen3_embed GGUF: llama.cpp's createEmbeddingContext vectors (normalized) within 1e-4 ($r)" '[ $? -eq 0 ]'
python3 - "$Q" "$tmp/qmean.gguf" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read()); k = b'qwen3.pooling_type'; i = b.index(k) + len(k)
struct.pack_into('<I', b, i + 4, 1); open(sys.argv[2], 'wb').write(b)
PY
"$CALDRIX" embed "$tmp/qmean.gguf" --ids 3,4,2 >/dev/null 2>"$tmp/err"; rc=$?
check "a decoder GGUF with pooling_type 1 (mean) is refused: a causal decoder pools by its last token" '[ $rc -ne 0 ] && grep -q "pooling mean" "$tmp/err"'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
