#!/usr/bin/env bash
# caldrix serve on Qwen3 GGUF files as llama.cpp's converter writes them (caldrix convert; tests/cli/test_rerank_gguf.sh
# checks the files against PyTorch and llama.cpp): the task comes from the file's pooling_type (4 rank: /v1/rerank;
# 3 last: /v1/embeddings), before any load (/v1/models) and after; /v1/rerank on the rerank GGUF gives the
# PyTorch golden scores within 1e-4 (../shared/fixtures/embed/README.md), the ranking exactly, and the bits of
# `caldrix rerank` on the same file; /v1/embeddings on the qwen3_embed GGUF gives the golden normalized vectors
# within 1e-4; each route refuses the other model's task.
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
F=../shared/fixtures/embed
"$CALDRIX" convert "$F/qwen3_rerank" "$tmp/rr.gguf" --type F32 --task rerank --yes-id 269 --no-id 104 >/dev/null 2>&1
"$CALDRIX" convert "$F/qwen3_embed" "$tmp/qe.gguf" --type F32 >/dev/null 2>&1
start_server gg --threads 1 --model "$tmp/rr.gguf=rr" --model "$tmp/qe.gguf=qe" ||
    { bad "the server starts"; echo "$pass passed, $fail failed"; exit 1; }
curl -s "$URL/v1/models" >"$tmp/models.json"
check "/v1/models before any load: the rerank GGUF is [\"rerank\"], the embedding GGUF [\"embed\"] (pooling_type)" \
    [ "$(jv "$tmp/models.json" "[m['tasks'] for m in d['data']]")" = '[["rerank"], ["embed"]]' ]

python3 -c "import json; g=json.load(open('$F/qwen3_rerank/golden.json')); print(json.dumps({'model':'rr','documents':[d['input_ids'] for d in g['documents']]}))" >"$tmp/rr.json"
st=$(post /v1/rerank "@$tmp/rr.json" "$tmp/rr_ans.json")
pairs=$(python3 -c "import json; print(' '.join('--pair-ids ' + ','.join(map(str, d['input_ids'])) for d in json.load(open('$F/qwen3_rerank/golden.json'))['documents']))")
"$CALDRIX" rerank "$tmp/rr.gguf" $pairs --json >"$tmp/cli.json" 2>/dev/null
r=$(python3 - "$F/qwen3_rerank/golden.json" "$tmp/rr_ans.json" "$tmp/cli.json" <<'PY'
import json, struct, sys
g, a, c = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
names = [d['name'] for d in g['documents']]
rk = [names[x['index']] for x in a['results']]
d = max(abs(x['relevance_score'] - g['documents'][x['index']]['score']) for x in a['results'])
f32 = lambda x: struct.pack('<f', x)
same = {x['index']: f32(x['relevance_score']) for x in a['results']} == {x['index']: f32(x['relevance_score']) for x in c['results']}
print('ok' if rk == g['ranking_by_score'] and d <= 1e-4 and same else 'ranking %s, max diff %.3g, same as the CLI %s' % (rk, d, same))
PY
)
check "/v1/rerank on the rerank GGUF: golden scores within 1e-4, ranking exact, the CLI's bits ($st $r)" [ "$st/$r" = 200/ok ]

python3 -c "import json; g=json.load(open('$F/qwen3_embed/golden.json')); print(json.dumps({'model':'qe','input':[i['input_ids'] for i in g['inputs']]}))" >"$tmp/qe.json"
st=$(post /v1/embeddings "@$tmp/qe.json" "$tmp/qe_ans.json")
r=$(python3 - "$F/qwen3_embed/golden.json" "$tmp/qe_ans.json" <<'PY'
import json, sys
g, a = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
d = max(max(abs(x - y) for x, y in zip(o['embedding'], i['embedding'])) for o, i in zip(a['data'], g['inputs']))
print('ok' if len(a['data']) == len(g['inputs']) and d <= 1e-4 else 'max diff %.3g' % d)
PY
)
check "/v1/embeddings on the qwen3_embed GGUF (last token, normalized): golden vectors within 1e-4 ($st $r)" [ "$st/$r" = 200/ok ]

st=$(post /v1/embeddings '{"model":"rr","input":[[3,4,5]]}' "$tmp/o.json")
check "/v1/embeddings on the rerank GGUF is a 400 naming its task ($st)" \
    [ "$st/$(jv "$tmp/o.json" "d['error']['code']")" = '400/"invalid_model_task"' ]
st=$(post /v1/rerank '{"model":"qe","documents":[[3,4,5]]}' "$tmp/o.json")
check "/v1/rerank on the embedding GGUF is a 400 naming its task ($st)" \
    [ "$st/$(jv "$tmp/o.json" "d['error']['code']")" = '400/"invalid_model_task"' ]
curl -s "$URL/v1/models" >"$tmp/models.json"
check "/v1/models after the loads: still [\"rerank\"], [\"embed\"]" \
    [ "$(jv "$tmp/models.json" "[m['tasks'] for m in d['data']]")" = '[["rerank"], ["embed"]]' ]

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
