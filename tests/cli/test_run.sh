#!/usr/bin/env bash
# caldrix run end to end: stories260K with -p and --prompt-ids against llama.cpp's goldens
# (../shared/fixtures/llamacpp/stories260K.json: prompt ids, 32 tokens, text), the hf fixtures
# through the CLI, and bad input (clear errors, exit codes below 128).
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
GOLD=../shared/fixtures/llamacpp/stories260K.json
MODEL=../shared/models/stories260K/stories260K.gguf

for i in 0 1 2 3 4; do
    args=$(python3 -c "
import json,sys; c=json.load(open('$GOLD'))['cases'][$i]
print('P' if c.get('prompt') else 'I', c.get('prompt') or ','.join(map(str,c['prompt_ids'])), sep='\t')")
    kind=${args%%$'\t'*}; val=${args#*$'\t'}
    if [ "$kind" = P ]; then
        "$CALDRIX" run "$MODEL" -p "$val" -n 32 --temp 0 --ignore-eos --json --top-logits 5 >"$tmp/out.json" 2>"$tmp/err"
    else
        "$CALDRIX" run "$MODEL" --prompt-ids "$val" -n 32 --temp 0 --ignore-eos --json --top-logits 5 >"$tmp/out.json" 2>"$tmp/err"
    fi
    if python3 - "$GOLD" "$i" "$tmp/out.json" <<'PY'
import json, math, sys
c = json.load(open(sys.argv[1]))['cases'][int(sys.argv[2])]
o = json.load(open(sys.argv[3]))
errs = []
if o['prompt'] != c['prompt_ids']: errs.append('prompt ids %s vs %s' % (o['prompt'], c['prompt_ids']))
if o['tokens'] != c['tokens']: errs.append('tokens differ')
if o['text'] != c['text']: errs.append('text %r vs %r' % (o['text'], c['text']))
for s, (st, gt) in enumerate(zip(o['steps'], c['top'])):
    if st['token'] != o['tokens'][s]: errs.append('step %d token mismatch' % s)
    top = dict((i, l) for i, l in st['top'])
    mx = st['top'][0][1]
    # probabilities need the full softmax; the ratios p_k/p_0 = exp(l_k - l_0) do not: an absolute
    # probability error of 2e-3 (the fixture's tolerance) is a ratio error of 2e-3 / p_0
    for gid, gp in zip(gt['ids'], gt['probs']):
        if gid in top:
            r = math.exp(top[gid] - mx); rg = gp / gt['probs'][0]
            if abs(r - rg) > 2e-3 / gt['probs'][0]: errs.append('step %d id %d ratio %g vs %g' % (s, gid, r, rg))
if errs: print('\n'.join(errs[:5])); sys.exit(1)
PY
    then ok "stories260K case $i matches llama.cpp (prompt ids, 32 tokens, text)"; else bad "stories260K case $i matches llama.cpp"; cat "$tmp/err"; fi
done

# the bundled model is the same file
"$CALDRIX" run -p "Once upon a time" -n 32 --temp 0 --ignore-eos --json >"$tmp/emb.json" 2>/dev/null
python3 -c "
import json,sys; o=json.load(open('$tmp/emb.json')); c=json.load(open('$GOLD'))['cases'][0]
sys.exit(0 if o['tokens']==c['tokens'] else 1)" && ok "the bundled model gives llama.cpp's tokens" || bad "the bundled model gives llama.cpp's tokens"

# a checkpoint directory through the CLI (PyTorch goldens)
for m in llama qwen3 mistral; do
    G=../shared/fixtures/hf/$m/golden.json
    ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$G'))['cases'][2]['prompt_ids'])))")
    "$CALDRIX" run ../shared/fixtures/hf/$m --prompt-ids "$ids" -n 16 --temp 0 --ignore-eos --json --top-logits 5 >"$tmp/hf.json" 2>"$tmp/err"
    python3 - "$G" "$tmp/hf.json" <<'PY' && ok "caldrix run $m (checkpoint) matches PyTorch" || { bad "caldrix run $m (checkpoint) matches PyTorch"; cat "$tmp/err"; }
import json, sys
c = json.load(open(sys.argv[1]))['cases'][2]; o = json.load(open(sys.argv[2]))
assert o['tokens'] == c['tokens'], (o['tokens'], c['tokens'])
assert o['text'] == ''
for st, gs in zip(o['steps'], c['steps']):
    mine = dict((i, l) for i, l in st['top'])
    for i, l in gs['top']:
        assert abs(mine[i] - l) <= 1e-3, (i, mine.get(i), l)
PY
done

# sampling: same seed, same tokens; different seed, (almost surely) different tokens
a=$("$CALDRIX" run "$MODEL" -p "Once" -n 24 --temp 1 --seed 7 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['tokens'])")
b=$("$CALDRIX" run "$MODEL" -p "Once" -n 24 --temp 1 --seed 7 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['tokens'])")
c=$("$CALDRIX" run "$MODEL" -p "Once" -n 24 --temp 1 --seed 8 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['tokens'])")
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ] && ok "sampling is reproducible by seed" || bad "sampling is reproducible by seed"

# bad input: clear message, exit code 1 or 2, never a signal
expect_fail() { # name, expected substring, command...
    local name=$1 want=$2; shift 2
    "$@" >"$tmp/o" 2>"$tmp/e"; local rc=$?
    if [ $rc -ge 1 ] && [ $rc -lt 128 ] && grep -q -- "$want" "$tmp/e"; then ok "$name"; else bad "$name (rc $rc: $(head -c 300 "$tmp/e"))"; fi
}
printf 'GGUF\3\0\0\0' >"$tmp/trunc.gguf"
expect_fail "a missing model is named" "no-such.gguf" "$CALDRIX" run no-such.gguf -p hi
expect_fail "a truncated GGUF is refused" "truncated" "$CALDRIX" run "$tmp/trunc.gguf" -p hi
expect_fail "an unknown option is named" "--bogus" "$CALDRIX" run "$MODEL" --bogus
expect_fail "a bad number is named" "--temp" "$CALDRIX" run "$MODEL" --temp abc
expect_fail "bad prompt ids are named" "--prompt-ids" "$CALDRIX" run "$MODEL" --prompt-ids 1,x
expect_fail "an out-of-vocabulary prompt id is refused" "outside the vocabulary" "$CALDRIX" run "$MODEL" --prompt-ids 1,99999
expect_fail "a prompt that fills the context is refused" "no room" "$CALDRIX" run "$MODEL" --prompt-ids 1,2,3,4 --ctx 4
expect_fail "text without a tokenizer is refused" "prompt-ids" "$CALDRIX" run ../shared/fixtures/hf/llama -p hello
expect_fail "bf16 compute is refused by name" "dtype" "$CALDRIX" run "$MODEL" --dtype bf16 -p hi
expect_fail "a MoE checkpoint is refused by name" "mixture of experts" "$CALDRIX" run ../shared/fixtures/hf/qwen3_moe --prompt-ids 1,2
"$CALDRIX" run --help >/dev/null && ok "run --help" || bad "run --help"

echo "run: $pass passed, $fail failed"
[ $fail -eq 0 ]
