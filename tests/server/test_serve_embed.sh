#!/usr/bin/env bash
# /v1/embeddings and /v1/rerank (docs/api.md, "Embeddings and reranking") against the PyTorch goldens of
# ../shared/fixtures/embed (README.md's tolerance: normalized components within 1e-4, raw ones within
# 1e-4 * max(1, |v|), rerank scores within 1e-4 and the ranking exact), through the official openai
# client (embeddings.create, float, the client's default base64 and base64 as sent) and curl; 16 clients
# at once mixing lengths give each vector the same bytes as its single request; bad input is a 400
# naming the field; a generation request to an embedding model and the reverse name the model's task.
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
F=../shared/fixtures/embed

# qwen3_embed declaring Matryoshka sizes (vLLM's config.json key), for "dimensions"
cp -r "$F/qwen3_embed" "$tmp/qwen3_mrl"
python3 - "$tmp/qwen3_mrl/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c['matryoshka_dimensions'] = [16, 32, 64]
json.dump(c, open(sys.argv[1], 'w'), indent=2)
PY

# one server for every task: four embedders (declared by their folders), a reranker (--task NAME=rerank)
# and a generation model
start_server embed --threads 1 --model "$F/bert_cls" --model "$F/bert_mean" --model "$F/xlmr_cls" \
    --model "$tmp/qwen3_mrl=qwen3_embed" --model "$F/qwen3_rerank" --task qwen3_rerank=rerank --yes-id 269 --no-id 104 \
    --model ../shared/models/stories260K/stories260K.gguf ||
    { bad "the server starts"; echo "$pass passed, $fail failed"; exit 1; }
EURL=$URL

# ---- /v1/models: tasks before and after a load ----
curl -s "$EURL/v1/models" >"$tmp/models.json"
check "/v1/models before any load: tasks [\"embed\"] x4 (folders), [\"rerank\"] (--task qwen3_rerank=rerank), [\"generate\"]" \
    [ "$(jv "$tmp/models.json" "[m['tasks'] for m in d['data']]")" = '[["embed"], ["embed"], ["embed"], ["embed"], ["rerank"], ["generate"]]' ]

# ---- the openai client: goldens, float and base64, Matryoshka, refusals, 16 clients at once ----
python3 - "$F" "$tmp/spec.json" <<'PY'
import json, sys
F = sys.argv[1]
c = json.load(open(F + '/bert_cls/golden.json')); q = json.load(open(F + '/qwen3_embed/golden.json'))
json.dump({'text_model': 'bert_cls', 'texts': [i['text'] for i in c['inputs']],
           'ids_model': 'qwen3_embed', 'ids': [i['input_ids'] for i in q['inputs']],
           'mrl_model': 'qwen3_embed', 'mrl_ids': [i['input_ids'] for i in q['inputs']], 'mrl_dims': 16},
          open(sys.argv[2], 'w'))
PY
# judge OUT: the client's answers against the goldens, one "name: ok|why" line each
judge() {
    python3 - "$F" "$1" <<'PY'
import base64, json, math, struct, sys
F, out = sys.argv[1], json.load(open(sys.argv[2]))
c = json.load(open(F + '/bert_cls/golden.json')); q = json.load(open(F + '/qwen3_embed/golden.json'))
def far(got, want, tol):
    if len(got) != len(want): return 'wrong length %d != %d' % (len(got), len(want))
    for v, g in zip(got, want):
        if len(v) != len(g): return 'dimension %d != %d' % (len(v), len(g))
        d = max(abs(a - b) for a, b in zip(v, g))
        if d > tol: return 'max abs diff %.3g' % d
    return 'ok'
gc = [i['embedding'] for i in c['inputs']]; gq = [i['embedding'] for i in q['inputs']]
print('bert_cls float:', far(out['text_float'], gc, 1e-4))
print('bert_cls default base64 (decoded by the client):', far(out['text_default'], gc, 1e-4))
b64 = [list(struct.unpack('<%df' % (len(base64.b64decode(s)) // 4), base64.b64decode(s))) for s in out['text_b64']]
f32 = lambda vs: [list(struct.unpack('<%df' % len(v), struct.pack('<%df' % len(v), *v))) for v in vs]
print('bert_cls base64 as sent, the client-decoded and float (as float32) are the same bits:',
      'ok' if b64 == out['text_default'] == f32(out['text_float']) else 'differs')
print('bert_cls one string:', far(out['text_one'], gc[:1], 1e-4))
print('usage.prompt_tokens:', 'ok' if out['text_usage']['prompt_tokens'] == sum(i['token_count'] for i in c['inputs']) else out['text_usage'])
print('object, index, model:', 'ok' if out['text_object'] == ['list', ['embedding'] * 6, list(range(6)), 'bert_cls'] else out['text_object'])
print('qwen3_embed ids:', far(out['ids_float'], gq, 1e-4))
print('qwen3_embed one id array:', far(out['ids_one'], gq[:1], 1e-4))
print('qwen3_embed usage:', 'ok' if out['ids_usage']['prompt_tokens'] == sum(i['token_count'] for i in q['inputs']) else out['ids_usage'])
def mrl(p, k):
    v = p[:k]; n = max(math.sqrt(sum(x * x for x in v)), 1e-12); return [x / n for x in v]
print('dimensions 16 (pooled golden truncated, renormalized):', far(out['mrl'], [mrl(i['pooled'], 16) for i in q['inputs']], 1e-4))
for k in ('dims_undeclared', 'dims_too_big', 'empty_string', 'empty_array'):
    e = out[k]
    print('%s is a 400 naming its field:' % k, 'ok' if isinstance(e, dict) and e['status'] == 400 and e['param'] in ('dimensions', 'input', 'input[1]') else e)
cc = out['concurrent']
print('16 clients at once: every vector equals its single request bit for bit:', 'ok' if cc['vectors'] == 31 and cc['same'] == 31 else cc)
PY
}
if (cd tests/server && { [ -f node_modules/openai/package.json ] && [ "$(node -p "require('./node_modules/openai/package.json').version")" = "$(node -p "require('./package.json').dependencies.openai")" ] || timeout 300 npm install --no-audit --no-fund --no-package-lock >"$tmp/npm.log" 2>&1; }); then
    if node tests/server/embed.mjs "$EURL/v1" "$tmp/spec.json" >"$tmp/client.json" 2>"$tmp/client.err"; then
        judge "$tmp/client.json" >"$tmp/judged.txt" 2>&1
        check "the goldens were judged ($(wc -l <"$tmp/judged.txt") checks)" [ "$(grep -c ': ' "$tmp/judged.txt")" = 15 ]
        while IFS= read -r line; do
            check "openai client: ${line%:*}" [ "${line##*: }" = ok ] || echo "    $line"
        done <"$tmp/judged.txt"
    else
        bad "the openai client ran"; cat "$tmp/client.err"
    fi
else
    bad "npm installs the pinned openai client (registry unreachable?)"; cat "$tmp/npm.log"
fi
grep -q '^caldrix_embed_passes_total' <(curl -s "$EURL/metrics") && \
    echo "# packing: $(curl -s "$EURL/metrics" | grep -E '^caldrix_embed_(requests|passes|inputs)_total' | tr '\n' ' ')"

# ---- curl: the other fixtures, truncation, bad input ----
# golden_check MODEL FIELD(text|input_ids) RAW(0|1): every golden input in one request, within the tolerance
golden_check() {
    local model=$1 field=$2 raw=$3
    python3 -c "import json,sys; g=json.load(open('$F/$model/golden.json')); print(json.dumps({'model':'$model','input':[i['$field'] for i in g['inputs']]}))" >"$tmp/req.json"
    local st; st=$(post /v1/embeddings "@$tmp/req.json" "$tmp/ans.json")
    python3 - "$F/$model/golden.json" "$tmp/ans.json" "$raw" "$st" <<'PY'
import json, math, sys
g, a, raw, st = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3] == '1', sys.argv[4]
if st != '200': print('status', st, a); sys.exit()
worst = 0
for i, d in zip(g['inputs'], a['data']):
    want = i['embedding']; tol = 1e-4 * (max(1, math.sqrt(sum(x * x for x in want))) if raw else 1)
    worst = max(worst, max(abs(x - y) for x, y in zip(d['embedding'], want)) / tol)
print('ok' if len(a['data']) == len(g['inputs']) and worst <= 1 else 'worst %.3g of the tolerance' % worst)
PY
}
r=$(URL=$EURL golden_check bert_mean text 1); check "bert_mean (mean pooling, no Normalize; texts, one cut to max_seq_length 20): raw vectors within 1e-4*|v| ($r)" [ "$r" = ok ]
r=$(URL=$EURL golden_check xlmr_cls input_ids 0); check "xlmr_cls (ids, one at max_seq_length exactly): within 1e-4 ($r)" [ "$r" = ok ]

URL=$EURL
over=$(python3 -c "import json; print(json.dumps({'model':'bert_cls','input':json.load(open('$F/bert_cls/golden.json'))['inputs'][-1]['text'],'truncate':False}))")
st=$(post /v1/embeddings "$over" "$tmp/o.json")
check "an input over max_seq_length with \"truncate\": false is a 400 naming it ($st)" \
    [ "$st/$(jv "$tmp/o.json" "[d['error']['param'], 'max_seq_length' in d['error']['message']]")" = '400/["input", true]' ]
st=$(post /v1/embeddings '{"model":"bert_cls","input":""}' "$tmp/o.json")
check "an empty input is a 400 ($st)" [ "$st/$(jv "$tmp/o.json" "d['error']['param']")" = '400/"input"' ]
st=$(post /v1/embeddings '{"model":"bert_cls","input":[]}' "$tmp/o.json")
check "an empty input array is a 400 ($st)" [ "$st/$(jv "$tmp/o.json" "d['error']['param']")" = '400/"input"' ]
st=$(post /v1/embeddings '{"model":"bert_cls","input":["a",""]}' "$tmp/o.json")
check "an empty string in the array is a 400 naming it ($st)" [ "$st/$(jv "$tmp/o.json" "d['error']['param']")" = '400/"input[1]"' ]
st=$(post /v1/embeddings '{"model":"bert_cls","input":[[]]}' "$tmp/o.json")
check "an empty id array is a 400 naming it ($st)" [ "$st/$(jv "$tmp/o.json" "d['error']['param']")" = '400/"input[0]"' ]
st=$(post /v1/completions '{"model":"bert_cls","prompt":"hi","max_tokens":2}' "$tmp/o.json")
check "a completion request to an embedding model is a 400 naming its task ($st)" \
    [ "$st/$(jv "$tmp/o.json" "[d['error']['code'], 'served for embed' in d['error']['message']]")" = '400/["invalid_model_task", true]' ]
st=$(post /v1/embeddings '{"model":"bert_cls","input":[[101,30522,102]]}' "$tmp/o.json")
check "an id outside the vocabulary is a 400 naming the input and the id ($st)" \
    [ "$st/$(jv "$tmp/o.json" "[d['error']['param'], '30522' in d['error']['message']]")" = '400/["input[0]", true]' ]
python3 -c "import json; print(json.dumps({'model':'bert_cls','input':['a']*2049}))" >"$tmp/many.json"
st=$(post /v1/embeddings "@$tmp/many.json" "$tmp/o.json")
check "2049 inputs is a 400 saying at most 2048 ($st)" [ "$st/$(jv "$tmp/o.json" "'2048' in d['error']['message']")" = '400/true' ]
long=$(python3 -c "print(list(range(3, 3 + 40)))")
st=$(post /v1/embeddings "{\"model\":\"qwen3_embed\",\"input\":[$long]}" "$tmp/o.json")
check "token ids longer than max_seq_length are a 400 (ids are used as given) ($st)" [ "$st" = 400 ]
st=$(post /v1/embeddings '{"model":"qwen3_embed","input":[[3,4,2]],"dimensions":24}' "$tmp/o.json")
check "dimensions not among matryoshka_dimensions is a 400 listing them ($st)" \
    [ "$st/$(jv "$tmp/o.json" "'16, 32, 64' in d['error']['message']")" = '400/true' ]
st=$(post /v1/embeddings '{"model":"qwen3_embed","input":"text"}' "$tmp/o.json")
check "text for a model without a tokenizer is a 400 asking for token ids ($st)" [ "$st" = 400 ]
st=$(post /v1/chat/completions '{"model":"bert_cls","messages":[{"role":"user","content":"hi"}]}' "$tmp/o.json")
check "a chat request to an embedding model is a 400 naming its task ($st)" \
    [ "$st/$(jv "$tmp/o.json" "[d['error']['code'], 'served for embed' in d['error']['message']]")" = '400/["invalid_model_task", true]' ]
st=$(post /embedding '{"model":"bert_cls","content":"Hello world"}' "$tmp/o.json")
check "llama-server's /embedding with content gives the golden vector" \
    [ "$st/$(python3 -c "import json; a=json.load(open('$tmp/o.json'))['data'][0]['embedding']; g=json.load(open('$F/bert_cls/golden.json'))['inputs'][0]['embedding']; print(max(abs(x-y) for x,y in zip(a,g)) <= 1e-4)")" = 200/True ]
curl -s "$EURL/v1/models" >"$tmp/models.json"
check "/v1/models after the loads: tasks [\"embed\"], context_length is max_seq_length" \
    [ "$(jv "$tmp/models.json" "[[m['tasks'], m.get('context_length')] for m in d['data'][:4]]")" = '[[["embed"], 64], [["embed"], 20], [["embed"], 32], [["embed"], 32]]' ]

# ---- /chunk on bert_cls's tokenizer, judged by the Rust tokenizers' ids of the fixture's long text ----
python3 -c "import json; t=json.load(open('$F/bert_cls/golden.json'))['inputs'][-1]['text']; print(json.dumps({'model':'bert_cls','text':t*3,'target_tokens':16,'overlap_tokens':4}))" >"$tmp/ch.json"
st=$(post /chunk "@$tmp/ch.json" "$tmp/ch_ans.json")
r=$(python3 - "$F/bert_cls" "$tmp/ch_ans.json" <<'PY'
import json, sys
d, a = sys.argv[1], json.load(open(sys.argv[2]))
g = json.load(open(d + '/golden.json'))['inputs'][-1]
vocab = open(d + '/vocab.txt', encoding='utf-8').read().split('\n')
one = g['untruncated_input_ids'][1:-1]          # [CLS] ... [SEP] of the text, from the Rust tokenizers
ref = one * 3                                   # the text three times: WordPiece splits at the spaces between
c = a['chunks']
why = []
if a['usage']['prompt_tokens'] != len(ref): why.append('%d tokens, reference %d' % (a['usage']['prompt_tokens'], len(ref)))
if c[0]['start_token'] != 0 or c[-1]['end_token'] != len(ref): why.append('the chunks do not cover the text')
for k, x in enumerate(c):
    if not 0 < x['end_token'] - x['start_token'] == x['n_tokens'] <= 16: why.append('chunk %d has %d tokens' % (k, x['n_tokens']))
    if k and not (c[k-1]['start_token'] < x['start_token'] and c[k-1]['end_token'] - 4 <= x['start_token'] <= c[k-1]['end_token']):
        why.append('chunk %d overlaps wrongly' % k)
    if x['end_token'] < len(ref) and vocab[ref[x['end_token']]].startswith('##'): why.append('chunk %d ends inside a word' % k)
    if k and vocab[ref[x['start_token']]].startswith('##'): why.append('chunk %d starts inside a word' % k)
print('ok' if not why else '; '.join(why[:3]))
PY
)
check "/chunk: chunks of at most target_tokens, overlap at most overlap_tokens, covering the text, cut between words (the Rust tokenizers' WordPiece ids) ($st $r)" [ "$st/$r" = 200/ok ]
st=$(post /chunk '{"model":"bert_cls","text":"a b c","target_tokens":4,"overlap_tokens":8}' "$tmp/o.json")
check "/chunk: overlap_tokens over target_tokens is a 400 InvalidChunkOverlap ($st)" \
    [ "$st/$(jv "$tmp/o.json" "[d['error']['code'], d['error']['param']]")" = '400/["InvalidChunkOverlap", "overlap_tokens"]' ]

# ---- /v1/rerank on qwen3_rerank (no tokenizer: whole formatted pairs as ids, no query) ----
python3 -c "import json; g=json.load(open('$F/qwen3_rerank/golden.json')); print(json.dumps({'model':'qwen3_rerank','documents':[d['input_ids'] for d in g['documents']]}))" >"$tmp/rr.json"
st=$(post /v1/rerank "@$tmp/rr.json" "$tmp/rr_ans.json")
r=$(python3 - "$F/qwen3_rerank/golden.json" "$tmp/rr_ans.json" <<'PY'
import json, sys
g, a = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
names = [d['name'] for d in g['documents']]
rk = [names[x['index']] for x in a['results']]
d = max(abs(x['relevance_score'] - g['documents'][x['index']]['score']) for x in a['results'])
print('ok' if rk == g['ranking_by_score'] and d <= 1e-4 else 'ranking %s, max diff %.3g' % (rk, d))
PY
)
check "/v1/rerank: the golden scores within 1e-4 and the ranking exact ($st $r)" [ "$st/$r" = 200/ok ]
python3 -c "import json; g=json.load(open('$F/qwen3_rerank/golden.json')); print(json.dumps({'model':'qwen3_rerank','documents':[d['input_ids'] for d in g['documents']],'top_n':2,'return_documents':False}))" >"$tmp/rr2.json"
st=$(post /rerank "@$tmp/rr2.json" "$tmp/o.json")
check "top_n 2 and return_documents false: the two best, no document ($st)" \
    [ "$st/$(jv "$tmp/o.json" "[len(d['results']), any('document' in x for x in d['results']), d['results'][0]['index'] == json.load(open('$tmp/rr_ans.json'))['results'][0]['index']]")" = '200/[2, false, true]' ]
# one document alone gives the same score bits as in the batch of five
python3 -c "import json; g=json.load(open('$F/qwen3_rerank/golden.json')); print(json.dumps({'model':'qwen3_rerank','documents':[g['documents'][2]['input_ids']]}))" >"$tmp/rr1.json"
st=$(post /v1/rerank "@$tmp/rr1.json" "$tmp/o.json")
check "a document scored alone has the same score as in the batch" \
    [ "$(python3 -c "import json; a=json.load(open('$tmp/o.json'))['results'][0]['relevance_score']; b=[x for x in json.load(open('$tmp/rr_ans.json'))['results'] if x['index']==2][0]['relevance_score']; print(a==b)")" = True ]
st=$(post /v1/rerank '{"model":"qwen3_rerank","query":"q","documents":["a document"]}' "$tmp/o.json")
check "text documents for a reranker without a tokenizer are a 400 ($st)" [ "$st/$(jv "$tmp/o.json" "d['error']['param']")" = '400/"documents[0]"' ]
st=$(post /v1/rerank '{"model":"qwen3_rerank","documents":[]}' "$tmp/o.json")
check "no documents is a 400 ($st)" [ "$st" = 400 ]
st=$(post /v1/embeddings '{"model":"qwen3_rerank","input":[[1,2,3]]}' "$tmp/o.json")
check "an embeddings request to a rerank model is a 400 naming its task ($st)" \
    [ "$st/$(jv "$tmp/o.json" "'served for rerank' in d['error']['message']")" = '400/true' ]
st=$(post /v1/rerank '{"model":"bert_cls","query":"q","documents":["a"]}' "$tmp/o.json")
check "a rerank request to an embedding model is a 400 naming its task ($st)" \
    [ "$st/$(jv "$tmp/o.json" "'served for embed' in d['error']['message']")" = '400/true' ]

# ---- a generation model refuses the embedding routes, naming its task; --task NAME= for no model ----
st=$(post /v1/embeddings '{"model":"stories260K","input":"Once upon a time"}' "$tmp/o.json")
check "an embeddings request to a generation model is a 400 naming its task ($st)" \
    [ "$st/$(jv "$tmp/o.json" "[d['error']['code'], 'served for generate' in d['error']['message']]")" = '400/["invalid_model_task", true]' ]
st=$(post /v1/completions '{"model":"stories260K","prompt":"Once upon a time","max_tokens":4,"temperature":0}' "$tmp/o.json")
check "... and it still generates beside the embedders ($st)" [ "$st/$(jv "$tmp/o.json" "d['usage']['completion_tokens']")" = 200/4 ]
st=$(post /chunk '{"model":"stories260K","text":"Once upon a time there was a cat. It was big.","target_tokens":6,"overlap_tokens":2}' "$tmp/o.json")
check "/chunk on a generation model's tokenizer (SentencePiece): ranges cover its tokens ($st)" \
    [ "$st/$(jv "$tmp/o.json" "[d['chunks'][0]['start_token'] == 0, d['chunks'][-1]['end_token'] == d['usage']['prompt_tokens'], all(c['n_tokens'] <= 6 for c in d['chunks'])]")" = '200/[true, true, true]' ]
curl -s "$URL/v1/models" >"$tmp/models.json"
check "/v1/models after the loads: [\"rerank\"] and [\"generate\"] stay" \
    [ "$(jv "$tmp/models.json" "[[m['tasks'], m['state']] for m in d['data'][4:]]")" = '[[["rerank"], "loaded"], [["generate"], "loaded"]]' ]

"$CALDRIX" serve --model "$F/bert_cls" --task nosuch=rerank --port 0 >/dev/null 2>"$tmp/err"; rc=$?
check "--task NAME=TASK for a name no model has exits 2 naming the option ($rc)" \
    sh -c "[ $rc = 2 ] && grep -q -- '--task nosuch=rerank: no model has that name' '$tmp/err'"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
