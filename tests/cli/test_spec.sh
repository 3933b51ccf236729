#!/usr/bin/env bash
# Speculative decoding through the CLI (issue 39): llama.cpp's greedy goldens for stories260K
# (../shared/fixtures/llamacpp/stories260K.json) still come out with --spec lookup at k = 1, 3 and
# 8, and with a draft model (its own Q8_0 copy, and itself; bench --draft too); --json's timings.draft and the stderr
# summary; refusals (bad --spec/--draft-max/--draft-min, a hybrid model, a mixture of experts or
# another vocabulary as draft) exit 2 naming the field or the models; --draft auto picks from a fake
# Ollama cache, or says none fits.
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; echo "  out: $(head -c 400 "$tmp/out")"; echo "  err: $(head -c 400 "$tmp/err")"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
GOLD=../shared/fixtures/llamacpp/stories260K.json
M=../shared/models/stories260K/stories260K.gguf

for k in 1 3 8; do
    good=0; : >"$tmp/props"
    for i in 0 1 2 3 4; do
        ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$GOLD'))['cases'][$i]['prompt_ids'])))")
        "$CALDRIX" run "$M" --prompt-ids "$ids" -n 32 --temp 0 --ignore-eos --json --spec lookup --draft-max $k \
            --draft-min $k --spec-keep-on >"$tmp/out" 2>"$tmp/err"
        python3 - "$GOLD" "$i" "$tmp/out" <<'PY' && good=$((good+1))
import json, sys
c = json.load(open(sys.argv[1]))['cases'][int(sys.argv[2])]
o = json.load(open(sys.argv[3]))
d = o['timings']['draft']
open(sys.argv[3] + '.p', 'w').write(str(d['proposed']))
sys.exit(not (o['tokens'] == c['tokens'] and d['proposer'] == 'lookup' and 0 <= d['accepted'] <= d['proposed']))
PY
        cat "$tmp/out.p" >>"$tmp/props" 2>/dev/null; echo >>"$tmp/props"
    done
    props=$(awk '{s+=$1} END {print s+0}' "$tmp/props")
    check "--spec lookup --draft-max $k --spec-keep-on: llama.cpp's 32 greedy tokens for all 5 cases ($props guesses scored)" \
        '[ $good -eq 5 ] && [ $props -gt 0 ]'
done

"$CALDRIX" run "$M" -p "Once upon a time" -n 48 --temp 0 --spec lookup >"$tmp/out" 2>"$tmp/err"; rc=$?
check "the stderr summary says whether the draft stayed on or was turned off" \
    '[ $rc -eq 0 ] && grep -Eq "^caldrix: draft lookup (stayed on \(accepted [0-9]+ %|was turned off \(accepted [0-9]+ of)" "$tmp/err"'
"$CALDRIX" run "$M" -p "Once upon a time" -n 48 --temp 0 --json >"$tmp/out" 2>"$tmp/err"
check "without --spec there is no timings.draft" \
    'python3 -c "import json,sys; sys.exit(\"draft\" in json.load(open(sys.argv[1]))[\"timings\"])" "$tmp/out"'

"$CALDRIX" run "$M" -p hi --spec ngram >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--spec ngram: exit 2 naming the choices" '[ $rc -eq 2 ] && grep -q "expected lookup, auto or off" "$tmp/err"'
"$CALDRIX" run "$M" -p hi --spec lookup --draft-max 0 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--draft-max 0: exit 2 with the range" '[ $rc -eq 2 ] && grep -q "\-\-draft-max.*\[1, 64\]" "$tmp/err"'
"$CALDRIX" run "$M" -p hi --spec lookup --draft-max 100000 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--draft-max 100000: exit 2" '[ $rc -eq 2 ] && grep -q "\-\-draft-max" "$tmp/err"'
"$CALDRIX" run "$M" -p hi --spec lookup --draft-max 2 --draft-min 3 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--draft-min over --draft-max: exit 2 naming both" '[ $rc -eq 2 ] && grep -q "\-\-draft-min 3 is more than --draft-max 2" "$tmp/err"'
"$CALDRIX" run "$M" -p hi --draft-max 4 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--draft-max without --spec: exit 2" '[ $rc -eq 2 ] && grep -q "add --spec lookup" "$tmp/err"'
"$CALDRIX" run ../shared/fixtures/hf/qwen3_5 --prompt-ids 1,2,3 -n 4 --spec lookup >"$tmp/out" 2>"$tmp/err"; rc=$?
check "Qwen3.5 (recurrent state) with --spec: refused with the reason, exit 2" \
    '[ $rc -eq 2 ] && grep -q "recurrent state" "$tmp/err" && grep -q "\-\-spec off" "$tmp/err"'

# a draft model: stories260K's own Q8_0 copy (caldrix quantize), then stories260K for itself
"$CALDRIX" quantize "$M" "$tmp/q8.gguf" Q8_0 >/dev/null 2>&1
for D in "$tmp/q8.gguf" "$M"; do
    good=0
    for i in 0 1 2 3 4; do
        ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$GOLD'))['cases'][$i]['prompt_ids'])))")
        "$CALDRIX" run "$M" --prompt-ids "$ids" -n 32 --temp 0 --ignore-eos --json --draft "$D" --spec-keep-on \
            >"$tmp/out" 2>"$tmp/err"
        python3 - "$GOLD" "$i" "$tmp/out" <<'PY' && good=$((good+1))
import json, sys
c = json.load(open(sys.argv[1]))['cases'][int(sys.argv[2])]
o = json.load(open(sys.argv[3]))
d = o['timings']['draft']
sys.exit(not (o['tokens'] == c['tokens'] and d['proposer'] == 'draft' and 0 < d['accepted'] <= d['proposed']))
PY
    done
    check "--draft $(basename "$D"): llama.cpp's 32 greedy tokens for all 5 cases, guesses kept" '[ $good -eq 5 ]'
done
"$CALDRIX" run "$M" -p "Once upon a time" -n 16 --temp 0 --draft "$tmp/q8.gguf" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "the stderr summary names the draft model" \
    '[ $rc -eq 0 ] && grep -Eq "^caldrix: draft $tmp/q8.gguf (stayed on|was turned off) \(accepted" "$tmp/err"'
"$CALDRIX" bench "$M" --draft "$tmp/q8.gguf" --spec-keep-on -t 1 -p 16 -n 16 -r 1 --json >"$tmp/out" 2>"$tmp/err"; rc=$?
check "bench --draft: the draft named in --json, its guesses scored and kept" \
    '[ $rc -eq 0 ] && python3 -c "import json,sys; o=json.load(open(sys.argv[1])); sys.exit(not (o[\"spec\"] == \"auto\" and o[\"draft\"] == sys.argv[2] and 0 < o[\"spec_accepted\"] <= o[\"spec_proposed\"]))" "$tmp/out" "$tmp/q8.gguf"'
"$CALDRIX" bench "$M" --draft ../shared/fixtures/hf/qwen3_moe -t 1 -r 1 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "bench: a mixture of experts as draft refused by name, exit 2" '[ $rc -eq 2 ] && grep -q "is a mixture of experts" "$tmp/err"'
"$CALDRIX" run "$M" -p hi -n 4 --draft ../shared/fixtures/hf/qwen3_moe >"$tmp/out" 2>"$tmp/err"; rc=$?
check "a mixture of experts as draft: refused by name, exit 2" '[ $rc -eq 2 ] && grep -q "is a mixture of experts" "$tmp/err"'
"$CALDRIX" run "$M" -p hi -n 4 --draft ../shared/fixtures/hf/llama >"$tmp/out" 2>"$tmp/err"; rc=$?
check "a draft of another vocabulary: refused naming both models, exit 2" \
    '[ $rc -eq 2 ] && grep -q "\-\-draft ../shared/fixtures/hf/llama for" "$tmp/err" && grep -q "not one vocabulary" "$tmp/err"'
"$CALDRIX" run "$M" -p hi -n 4 --draft "$M" --spec lookup >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--draft with --spec lookup: exit 2" '[ $rc -eq 2 ] && grep -q "give --spec auto" "$tmp/err"'

# --draft auto: the cached models (a fake Ollama cache, offline) that read at most half the model's
# weight bytes a token and pass --draft's checks, the one reading the most first
put_ollama() { # CACHE NAME GGUF: a complete Ollama tag, as caldrix pull leaves it
    local cache=$1 name=$2 f=$3 hex size
    hex=$(sha256sum "$f" | cut -d' ' -f1); size=$(stat -c %s "$f")
    mkdir -p "$cache/ollama/blobs" "$cache/ollama/manifests/registry.ollama.ai/library/$name"
    cp "$f" "$cache/ollama/blobs/sha256-$hex"
    printf '{"schemaVersion":2,"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:%s","size":%s}]}' \
        "$hex" "$size" >"$cache/ollama/manifests/registry.ollama.ai/library/$name/latest"
}
"$CALDRIX" quantize "$M" "$tmp/q4.gguf" Q4_0 >/dev/null 2>&1
mkdir -p "$tmp/hf"
put_ollama "$tmp/c1" storiesq4 "$tmp/q4.gguf"; put_ollama "$tmp/c1" storiesq8 "$tmp/q8.gguf"; put_ollama "$tmp/c1" storiesf32 "$M"
ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$GOLD'))['cases'][0]['prompt_ids'])))")
auto_run() { # CACHE: run --draft auto on case 0
    CALDRIX_CACHE=$1 HF_HUB_CACHE=$tmp/hf CALDRIX_OFFLINE=1 "$CALDRIX" run "$M" --prompt-ids "$ids" -n 32 --temp 0 \
        --ignore-eos --json --draft auto --spec-keep-on >"$tmp/out" 2>"$tmp/err"
}
golden0() { python3 -c "import json,sys; g=json.load(open(sys.argv[1]))['cases'][0]; o=json.load(open(sys.argv[2])); sys.exit(not (o['tokens'] == g['tokens'] and o['timings']['draft']['proposer'] == sys.argv[3]))" "$GOLD" "$tmp/out" "$1"; }
auto_run "$tmp/c1"; rc=$?
check "--draft auto: the Q8_0 copy (the most bytes within half the model's), the full copy passed over; llama.cpp's tokens" \
    '[ $rc -eq 0 ] && grep -q "draft auto chose .*/storiesq8/latest/model.gguf" "$tmp/err" && grep -q "passed over: .*storiesf32.*more than half" "$tmp/err" && golden0 draft'
# caldrix models drafts: the same candidates in --draft auto's order, with the outcome run recorded
drafts() { CALDRIX_CACHE=$1 HF_HUB_CACHE=$tmp/hf CALDRIX_OFFLINE=1 "$CALDRIX" models drafts "$M" "${@:2}" >"$tmp/out" 2>"$tmp/err"; }
drafts "$tmp/c1" --json; rc=$?
check "models drafts --json: the Q8_0 copy first, then the Q4_0 (both ok), the full copy passed over; run's outcome: stayed on" \
    '[ $rc -eq 0 ] && python3 - "$tmp/out" <<PY
import json, sys
o = json.load(open(sys.argv[1])); c = o["candidates"]
ok = [x["path"].split("/")[-3] for x in c if x["ok"]]; bad = [x for x in c if not x["ok"]]
sys.exit(not (ok == ["storiesq8", "storiesq4"] and len(bad) == 1 and "storiesf32" in bad[0]["path"]
              and "more than half" in bad[0]["why"] and c[0]["last_run"]["outcome"] == "stayed on"
              and c[0]["last_run"]["by"] == "run" and c[0]["last_run"]["accepted"] > 0 and c[1].get("last_run") is None))
PY'
drafts "$tmp/c1"; rc=$?
check "models drafts: \"last run on this machine: <draft> stayed on\" on the Q8_0 copy, the passed-over one and why" \
    '[ $rc -eq 0 ] && grep -q "^2 draft candidates for .* best first" "$tmp/out" && grep -q "storiesq8/latest/model.gguf (.*last run on this machine: .*storiesq8/latest/model.gguf stayed on (accepted [0-9]* of [0-9]*, caldrix run" "$tmp/out" && grep -A1 "^passed over" "$tmp/out" | grep -q "storiesf32.*more than half"'
drafts "$tmp/c1" --json; q4=$(python3 -c "import json,sys; print([x['path'] for x in json.load(open(sys.argv[1]))['candidates'] if 'storiesq4' in x['path']][0])" "$tmp/out")
CALDRIX_CACHE=$tmp/c1 HF_HUB_CACHE=$tmp/hf CALDRIX_OFFLINE=1 "$CALDRIX" run "$M" -p "Once upon a time" -n 48 --temp 1.5 --seed 3 \
    --draft "$q4" >/dev/null 2>"$tmp/err.run"; rc=$?
word=$(sed -n 's/^caldrix: draft .* \(stayed on\|was turned off\) (accepted.*/\1/p' "$tmp/err.run"); drafts "$tmp/c1"; rc2=$?
check "a run that ends \"$word\" is what models drafts says of that draft next" \
    '[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ -n "$word" ] && grep -q "storiesq4/latest/model.gguf.*last run on this machine: .*storiesq4/latest/model.gguf $word" "$tmp/out"'
mkdir -p "$tmp/c3"; drafts "$tmp/c3"; rc=$?
check "models drafts with empty caches: none, said so, exit 0" '[ $rc -eq 0 ] && grep -q "^0 draft candidates for .* among 0 cached models" "$tmp/out"'

rm -rf "$tmp/c2"; put_ollama "$tmp/c2" storiesf32 "$M"
auto_run "$tmp/c2"; rc=$?
check "--draft auto with no fit draft: says none was found and why, prompt lookup instead (llama.cpp's tokens)" \
    '[ $rc -eq 0 ] && grep -q "draft auto found no draft for .* among 1 candidate: .*more than half.*; speculating by prompt lookup" "$tmp/err" && golden0 lookup'
mkdir -p "$tmp/c3"
auto_run "$tmp/c3"; rc=$?
check "--draft auto with empty caches: says so, prompt lookup instead" \
    '[ $rc -eq 0 ] && grep -q "the caches hold no model to draft with; speculating by prompt lookup" "$tmp/err" && golden0 lookup'

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
