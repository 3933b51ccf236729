#!/usr/bin/env bash
# caldrix embed: the BERT fixtures of ../shared/fixtures/embed through the command line: every
# golden text (-p and -f) gives the golden vector within README.md's tolerance (normalized 1e-4;
# raw 1e-4·max(1, ‖v‖)), the token counts are the goldens' (truncation included), the vectors of one
# batch are the bits of each alone (--threads 1 and 3), token-id inputs work, and bad input is
# refused with a message and a non-zero exit.
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
E=../shared/fixtures/embed

compare() { # GOLDEN OUT.json FIELD: vectors and token counts against the golden
    python3 - "$1" "$2" "$3" <<'PY'
import json, math, sys
g = json.load(open(sys.argv[1])); o = json.load(open(sys.argv[2])); field = sys.argv[3]
norm = g['pipeline']['normalize']
assert len(o['data']) == len(g['inputs'])
for gi, oi in zip(g['inputs'], o['data']):
    want, got = gi[field], oi['embedding']
    n = math.sqrt(sum(w * w for w in want))
    tol = 1e-4 if norm else 1e-4 * max(1.0, n)
    d = max(abs(a - b) for a, b in zip(want, got))
    assert d <= tol, (gi['name'], d, tol)
    assert oi['tokens'] == gi['token_count'], (gi['name'], oi['tokens'], gi['token_count'])
PY
}

for fx in bert_cls bert_mean; do
    g=$E/$fx/golden.json
    python3 -c "import json; [print(i['text']) for i in json.load(open('$g'))['inputs']]" >"$tmp/$fx.txt"
    args=(); while IFS= read -r l; do args+=(-p "$l"); done <"$tmp/$fx.txt"
    "$CALDRIX" embed "$E/$fx" "${args[@]}" --json >"$tmp/$fx.p.json" 2>"$tmp/err"
    check "$fx: -p texts give the golden vectors and token counts" '[ $? -eq 0 ] && compare "$g" "$tmp/$fx.p.json" embedding'
    "$CALDRIX" embed "$E/$fx" -f "$tmp/$fx.txt" --json --threads 3 >"$tmp/$fx.f.json" 2>"$tmp/err"
    check "$fx: -f FILE on 3 threads gives the same bits as -p" 'cmp -s "$tmp/$fx.p.json" "$tmp/$fx.f.json"'
    : >"$tmp/$fx.alone"
    while IFS= read -r l; do "$CALDRIX" embed "$E/$fx" -p "$l" >>"$tmp/$fx.alone" 2>>"$tmp/err"; done <"$tmp/$fx.txt"
    "$CALDRIX" embed "$E/$fx" -f "$tmp/$fx.txt" >"$tmp/$fx.batch" 2>>"$tmp/err"
    check "$fx: each vector of the batch is the bits of the input alone" 'cmp -s "$tmp/$fx.alone" "$tmp/$fx.batch"'
done

ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$E/bert_cls/golden.json'))['inputs'][0]['input_ids'])))")
"$CALDRIX" embed "$E/bert_cls" --ids "$ids" >"$tmp/ids" 2>"$tmp/err"
check "--ids: the golden ids give the text's vector" '[ $? -eq 0 ] && [ "$(head -1 "$tmp/ids")" = "$(head -1 "$tmp/bert_cls.batch")" ]'

# XLM-R (token ids only): each golden input_ids as --ids, one call, against the golden vectors
g=$E/xlmr_cls/golden.json
xargs_ids=$(python3 -c "import json; print(' '.join('--ids ' + ','.join(map(str, i['input_ids'])) for i in json.load(open('$g'))['inputs']))")
"$CALDRIX" embed "$E/xlmr_cls" $xargs_ids --json >"$tmp/x.json" 2>"$tmp/err"
check "xlmr_cls: --ids give the golden vectors" '[ $? -eq 0 ] && compare "$g" "$tmp/x.json" embedding'
"$CALDRIX" embed "$E/xlmr_cls" -p hello >/dev/null 2>"$tmp/err"; rc=$?
check "xlmr_cls: text without tokenizer files is refused" '[ $rc -eq 1 ] && grep -q "tokenizer" "$tmp/err"'

"$CALDRIX" embed "$E/bert_cls" --ids 101,30522,102 >/dev/null 2>"$tmp/err"; rc=$?
check "an id outside the vocabulary: exit 1 naming it" '[ $rc -eq 1 ] && grep -q "30522" "$tmp/err" && grep -q vocabulary "$tmp/err"'
printf 'a\n\nb\n' >"$tmp/empty.txt"
"$CALDRIX" embed "$E/bert_cls" -f "$tmp/empty.txt" >/dev/null 2>"$tmp/err"; rc=$?
check "an empty line in -f: exit 2 naming the line" '[ $rc -eq 2 ] && grep -q "line 2 is empty" "$tmp/err"'
"$CALDRIX" embed "$E/bert_cls" >/dev/null 2>"$tmp/err"; rc=$?
check "no inputs: exit 2" '[ $rc -eq 2 ] && grep -q "no inputs" "$tmp/err"'
"$CALDRIX" embed "$E/bert_cls" -p x --ids 1 >/dev/null 2>"$tmp/err"; rc=$?
check "texts and ids together: exit 2" '[ $rc -eq 2 ] && grep -q "not both" "$tmp/err"'
mkdir -p "$tmp/dense" && cp "$E/bert_mean"/*.json "$E/bert_mean"/*.txt "$E/bert_mean/model.safetensors" "$tmp/dense/" && cp -r "$E/bert_mean/1_Pooling" "$tmp/dense/"
python3 - "$tmp/dense/modules.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
json.dump(m, open(sys.argv[1], "w"))
PY
"$CALDRIX" embed "$tmp/dense" -p x >/dev/null 2>"$tmp/err"; rc=$?
check "a module caldrix does not implement is refused by name" '[ $rc -eq 1 ] && grep -q "sentence_transformers.models.Dense" "$tmp/err"'
"$CALDRIX" run "$E/bert_cls" -p hi -n 2 >/dev/null 2>"$tmp/err"; rc=$?
check "run on an encoder is refused (it generates nothing)" '[ $rc -ne 0 ] && grep -qi "encoder" "$tmp/err"'
"$CALDRIX" serve "$E/bert_cls" --draft "$E/bert_mean" --port 1 >/dev/null 2>"$tmp/err"; rc=$?
check "serve an encoder with --draft: refused naming --draft (a draft speeds up generation only)" \
    '[ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q -- "--draft" "$tmp/err" && grep -q "generation only" "$tmp/err"'
"$CALDRIX" serve ../shared/fixtures/embed/qwen3_embed --task rerank --draft ../shared/fixtures/embed/qwen3_embed --port 1 >/dev/null 2>"$tmp/err"; rc=$?
check "serve --task rerank with --draft: refused before any weight is read" \
    '[ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "served for rerank" "$tmp/err"'
"$CALDRIX" embed --help | grep -q "sentence-transformers" && "$CALDRIX" --help | grep -q "^  embed"
check "embed is in --help and has its own" '[ $? -eq 0 ]'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
