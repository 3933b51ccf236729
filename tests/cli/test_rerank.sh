#!/usr/bin/env bash
# caldrix rerank and the decoder embedding model through the command line: qwen3_rerank's formatted
# pairs (--pair-ids) give the golden scores within 1e-4, logits within 1e-3 and the golden ranking;
# qwen3_embed's golden ids (--ids) give the golden vectors within 1e-4, in one call and one by one (the
# same bits); bad input is refused with a message and a non-zero exit.
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
E=../shared/fixtures/embed

R=$E/qwen3_rerank
pairs=$(python3 -c "import json; print(' '.join('--pair-ids ' + ','.join(map(str, d['input_ids'])) for d in json.load(open('$R/golden.json'))['documents']))")
"$CALDRIX" rerank "$R" $pairs --yes-id 269 --no-id 104 --json >"$tmp/r.json" 2>"$tmp/err"
check "qwen3_rerank: --pair-ids give the golden scores, logits and ranking" '[ $? -eq 0 ] && python3 - "$R/golden.json" "$tmp/r.json" <<'"'"'PY'"'"'
import json, sys
g = json.load(open(sys.argv[1])); o = json.load(open(sys.argv[2]))["results"]
docs = g["documents"]
assert [docs[r["index"]]["name"] for r in o] == g["ranking_by_score"], o
for r in o:
    d = docs[r["index"]]
    assert abs(r["relevance_score"] - d["score"]) <= 1e-4, (d["name"], r)
    assert abs(r["logit_yes"] - d["logit_yes"]) <= 1e-3 and abs(r["logit_no"] - d["logit_no"]) <= 1e-3, (d["name"], r)
PY'
: >"$tmp/alone"
for p in $(python3 -c "import json; print(' '.join(','.join(map(str, d['input_ids'])) for d in json.load(open('$R/golden.json'))['documents']))"); do
    "$CALDRIX" rerank "$R" --pair-ids "$p" --yes-id 269 --no-id 104 | cut -d' ' -f2 >>"$tmp/alone"
done
"$CALDRIX" rerank "$R" $pairs --yes-id 269 --no-id 104 --threads 3 | sort -n | cut -d' ' -f2 >"$tmp/batch"
check "qwen3_rerank: each score of the batch is the bits of the pair alone" 'cmp -s "$tmp/alone" "$tmp/batch"'
"$CALDRIX" rerank "$R" $pairs >/dev/null 2>"$tmp/err"; rc=$?
check "no tokenizer and no --yes-id/--no-id: refused" '[ $rc -eq 1 ] && grep -q "yes" "$tmp/err"'
"$CALDRIX" rerank "$R" --pair-ids 3,320 --yes-id 269 --no-id 104 >/dev/null 2>"$tmp/err"; rc=$?
check "an id outside the vocabulary: refused naming it" '[ $rc -eq 1 ] && grep -q "320" "$tmp/err"'
"$CALDRIX" rerank "$R" --query q >/dev/null 2>"$tmp/err"; rc=$?
check "a query without documents: usage error" '[ $rc -eq 2 ]'
"$CALDRIX" rerank "$E/bert_cls" --query q doc >/dev/null 2>"$tmp/err"; rc=$?
check "an encoder is no reranker: refused" '[ $rc -eq 1 ] && grep -q "encoder" "$tmp/err"'

Q=$E/qwen3_embed
ids=$(python3 -c "import json; print(' '.join('--ids ' + ','.join(map(str, i['input_ids'])) for i in json.load(open('$Q/golden.json'))['inputs']))")
"$CALDRIX" embed "$Q" $ids --json >"$tmp/q.json" 2>"$tmp/err"
check "qwen3_embed: --ids give the golden vectors (last token, Normalize)" '[ $? -eq 0 ] && python3 - "$Q/golden.json" "$tmp/q.json" <<'"'"'PY'"'"'
import json, sys
g = json.load(open(sys.argv[1])); o = json.load(open(sys.argv[2]))
assert o["pooling"] == "lasttoken" and o["normalize"]
for gi, oi in zip(g["inputs"], o["data"]):
    assert max(abs(a - b) for a, b in zip(gi["embedding"], oi["embedding"])) <= 1e-4, gi["name"]
PY'
: >"$tmp/qa"
for p in $(python3 -c "import json; print(' '.join(','.join(map(str, i['input_ids'])) for i in json.load(open('$Q/golden.json'))['inputs']))"); do
    "$CALDRIX" embed "$Q" --ids "$p" >>"$tmp/qa"
done
"$CALDRIX" embed "$Q" $ids >"$tmp/qb"
check "qwen3_embed: each vector of the batch is the bits of the input alone" 'cmp -s "$tmp/qa" "$tmp/qb"'
"$CALDRIX" inspect "$Q" >"$tmp/insp" 2>&1; rc=$?
check "inspect qwen3_embed: the prefix-less tensors all map" '[ $rc -eq 0 ] && grep -q "missing_required_tensors=none" "$tmp/insp" && grep -q "unused_tensors=none" "$tmp/insp"'
"$CALDRIX" rerank --help | grep -q "pair-ids" && "$CALDRIX" --help | grep -q "^  rerank"
check "rerank is in --help and has its own" '[ $? -eq 0 ]'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
