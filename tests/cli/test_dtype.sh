#!/usr/bin/env bash
# caldrix run --dtype: the default per format and stored type (bf16 for bf16 and f16 checkpoints,
# f32 for f32 ones and for GGUF files), PyTorch's bf16 goldens through the CLI with the default,
# the f32 goldens with --dtype f32, what the summary line, --json and --help say, and refusals.
# Greedy comparison as ../shared/fixtures/hf/INDEX.md says: tokens exact before a marked near-tie
# (there: either tied id; a different pick ends the case), top-5 logits within logit_tolerance.
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
HF=../shared/fixtures/hf

# golden FILE OUT CASE: the bf16 (greedy, near-tie) or f32 (1e-3) contract on one case
check_case() {
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
g = json.load(open(sys.argv[1])); o = json.load(open(sys.argv[2])); c = g['cases'][int(sys.argv[3])]
tol = g.get('logit_tolerance', 1e-3)
for s, (gs, mine) in enumerate(zip(c['steps'], o['steps'])):
    top = dict((i, l) for i, l in mine['top'])
    for i, l in gs['top']:
        assert i in top and abs(top[i] - l) <= tol, ('step', s, 'id', i, top.get(i), l)
    if o['tokens'][s] != c['tokens'][s]:
        tied = [i for i, l in gs['top'] if l == gs['top'][0][1]]
        assert gs.get('near_tie') and o['tokens'][s] in tied, ('step', s, o['tokens'][s], c['tokens'][s])
        break
else:
    assert o['tokens'] == c['tokens'], (o['tokens'], c['tokens'])
PY
}

run_case() { # MODEL GOLDEN CASE [args...]
    local m=$1 g=$2 c=$3; shift 3
    local ids
    ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$g'))['cases'][$c]['prompt_ids'])))")
    "$CALDRIX" run "$m" --prompt-ids "$ids" -n 16 --temp 0 --ignore-eos --json --top-logits 320 "$@" >"$tmp/o.json" 2>"$tmp/err"
}

for m in llama_bf16 llama_f16; do
    good=1
    for c in 0 1 2; do
        run_case $HF/$m $HF/$m/golden_bf16.json $c && check_case $HF/$m/golden_bf16.json "$tmp/o.json" $c || { good=0; cat "$tmp/err"; }
        python3 -c "import json,sys; t=json.load(open('$tmp/o.json')); sys.exit(0 if (t['dtype'],t['kv_type'])==('bf16','bf16') else 1)" || good=0
    done
    [ $good = 1 ] && ok "$m computes in bf16 by default, with a bf16 cache, and matches PyTorch's bf16 goldens" || bad "$m: bf16 by default matches the bf16 goldens"
    good=1
    for c in 0 1 2; do
        run_case $HF/$m $HF/$m/golden.json $c --dtype f32 && check_case $HF/$m/golden.json "$tmp/o.json" $c || { good=0; cat "$tmp/err"; }
    done
    [ $good = 1 ] && ok "$m --dtype f32 matches the f32 goldens (1e-3)" || bad "$m --dtype f32 matches the f32 goldens"
done
# an f32 checkpoint: f32 by default, bf16 when asked (its weights cast as torch_dtype=bfloat16 does)
run_case $HF/qwen2 $HF/qwen2/golden.json 0 && check_case $HF/qwen2/golden.json "$tmp/o.json" 0 &&
    python3 -c "import json,sys; sys.exit(0 if json.load(open('$tmp/o.json'))['dtype']=='f32' else 1)" &&
    ok "an f32 checkpoint computes in f32 by default" || bad "an f32 checkpoint computes in f32 by default"
run_case $HF/qwen2 $HF/qwen2/golden_bf16.json 0 --dtype bf16 && check_case $HF/qwen2/golden_bf16.json "$tmp/o.json" 0 &&
    ok "qwen2 --dtype bf16 (f32 weights cast to bf16) matches the bf16 goldens" || { bad "qwen2 --dtype bf16 matches the bf16 goldens"; cat "$tmp/err"; }
run_case $HF/qwen3 $HF/qwen3/golden_bf16.json 1 --dtype bf16 --kv-type f32 && check_case $HF/qwen3/golden_bf16.json "$tmp/o.json" 1 &&
    ok "qwen3 --dtype bf16 --kv-type f32 matches the bf16 goldens" || { bad "qwen3 --dtype bf16 --kv-type f32"; cat "$tmp/err"; }
# a mixture of experts (the bf16 pass with ops.c's model_moe): PyTorch's bf16 goldens of the qwen3_moe fixture
run_case $HF/qwen3_moe tests/golden/bf16-qwen3_moe.json 2 --dtype bf16 && check_case tests/golden/bf16-qwen3_moe.json "$tmp/o.json" 2 &&
    ok "qwen3_moe --dtype bf16 matches PyTorch's bf16 goldens" || { bad "qwen3_moe --dtype bf16 matches the bf16 goldens"; cat "$tmp/err"; }
# Phi-3 with LongRoPE (case medium passes original_max_position_embeddings while decoding: the engine recomputes)
run_case $HF/phi3 tests/golden/bf16-phi3.json 1 --dtype bf16 && check_case tests/golden/bf16-phi3.json "$tmp/o.json" 1 &&
    ok "phi3 (LongRoPE) --dtype bf16 matches PyTorch's bf16 goldens past the original context" ||
    { bad "phi3 --dtype bf16 matches the bf16 goldens"; cat "$tmp/err"; }
# ... stored in bf16, it computes in bf16 by default, and under a weight budget (experts streamed from the file as
# stored) gives the same bits as resident; an f32 checkpoint's experts would be copied by the cast: --dtype bf16 with
# a budget is refused there, saying why
mkdir -p "$tmp/q3b"
python3 - $HF/qwen3_moe "$tmp/q3b" <<'PY'
import json, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for f in ('config.json', 'generation_config.json'):
    shutil.copy(src + '/' + f, dst + '/' + f)
raw = open(src + '/model.safetensors', 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
hdr, body = json.loads(raw[8:8 + n]), raw[8 + n:]
out, parts, off = {}, [], 0
for name, t in sorted((k, v) for k, v in hdr.items() if k != '__metadata__'):
    a, b = t['data_offsets']
    w = struct.unpack('<%dI' % ((b - a) // 4), body[a:b])
    h = [((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF for x in w]  # round to nearest even (no NaN here)
    parts.append(struct.pack('<%dH' % len(h), *h))
    out[name] = {'dtype': 'BF16', 'shape': t['shape'], 'data_offsets': [off, off + 2 * len(h)]}
    off += 2 * len(h)
j = json.dumps(out).encode()
j += b' ' * (-len(j) % 8)
open(dst + '/model.safetensors', 'wb').write(struct.pack('<Q', len(j)) + j + b''.join(parts))
PY
run_case "$tmp/q3b" tests/golden/bf16-qwen3_moe.json 2 && cp "$tmp/o.json" "$tmp/resident.json" &&
    run_case "$tmp/q3b" tests/golden/bf16-qwen3_moe.json 2 --weight-budget 400K &&
    python3 -c "import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); sys.exit(0 if a['dtype']=='bf16' and a['tokens']==b['tokens'] and a['steps']==b['steps'] else 1)" "$tmp/resident.json" "$tmp/o.json" &&
    ok "a bf16 qwen3_moe checkpoint computes in bf16, and under a weight budget gives the resident bits" ||
    { bad "a bf16 qwen3_moe under a weight budget"; cat "$tmp/err"; }
# BitNet has no bf16 pass (tiny checkpoint of scripts/goldens/tiny_fixtures.py)
python3 scripts/goldens/tiny_fixtures.py bitnet "$tmp/bitnet" '{}' >/dev/null

# the summary line names the compute type and why; --help lists the defaults
"$CALDRIX" run $HF/llama_f16 --prompt-ids 5,6,7 -n 2 --temp 0 >/dev/null 2>"$tmp/err"
grep -q "bf16 compute \[checkpoint stored in bf16 or f16" "$tmp/err" && grep -q "bf16 KV cache" "$tmp/err" &&
    ok "the run summary says bf16 compute, why, and the bf16 cache" || { bad "the run summary says bf16 compute"; cat "$tmp/err"; }
"$CALDRIX" run ../shared/fixtures/hf-gguf/llama_bf16.gguf --prompt-ids 5,6,7 -n 2 --temp 0 >/dev/null 2>"$tmp/err"
grep -q "f32 compute \[GGUF" "$tmp/err" && ok "a GGUF of BF16 tensors computes in f32, as llama.cpp does, and says so" ||
    { bad "a GGUF of BF16 tensors says f32 compute"; cat "$tmp/err"; }
"$CALDRIX" run --help >"$tmp/help"
grep -q -- "--dtype auto|f32|bf16" "$tmp/help" && grep -q "checkpoint stored in bf16 or f16: bf16" "$tmp/help" &&
    grep -q "GGUF: f32" "$tmp/help" && grep -q "checkpoint stored in f32: f32" "$tmp/help" &&
    ok "run --help documents the default compute type per format and stored type" || bad "run --help documents the dtype defaults"

# inspect: the compute type, why, and the KV bytes it holds (2 x 3 layers x 2 KV heads x 16 x 256
# positions x 2 or 4 bytes, from config.json's shape)
"$CALDRIX" inspect $HF/llama_bf16 --json >"$tmp/i.json" 2>/dev/null
"$CALDRIX" inspect $HF/llama --json >"$tmp/j.json" 2>/dev/null
python3 - "$tmp/i.json" "$tmp/j.json" <<'PY' && ok "inspect names the compute type and why, and counts a bf16 cache at 2 bytes" || bad "inspect: compute type and KV bytes"
import json, sys
b = json.load(open(sys.argv[1])); f = json.load(open(sys.argv[2]))
assert b['compute_dtype'] == 'bf16' and 'bf16 or f16' in b['compute_dtype_reason'], b
assert f['compute_dtype'] == 'f32', f
assert b['estimated_memory']['kv_bytes'] == 2 * 3 * 2 * 16 * 256 * 2, b['estimated_memory']
assert f['estimated_memory']['kv_bytes'] == 2 * 3 * 2 * 16 * 256 * 4, f['estimated_memory']
PY
"$CALDRIX" inspect ../shared/fixtures/hf-gguf/llama_bf16.gguf >"$tmp/g.txt" 2>/dev/null
grep -q "compute_dtype=f32 (GGUF" "$tmp/g.txt" && ok "inspect of a BF16 GGUF says f32 compute, as llama.cpp" || bad "inspect of a BF16 GGUF"
# "--dtype f32|bf16 picks another" only where --dtype bf16 would be taken
"$CALDRIX" inspect $HF/llama_bf16 >"$tmp/b.txt" 2>/dev/null
"$CALDRIX" inspect "$tmp/bitnet" >"$tmp/m.txt" 2>/dev/null
grep -q "^  compute_dtype=bf16 .*picks another" "$tmp/b.txt" && grep -q "^  compute_dtype=f32 " "$tmp/m.txt" &&
    ! grep -q "picks another" "$tmp/m.txt" && ! grep -q "picks another" "$tmp/g.txt" &&
    ok "inspect offers --dtype bf16 only for a checkpoint of a family with a bf16 pass" ||
    { bad "inspect offers --dtype bf16 only where it is taken"; grep compute_dtype "$tmp/b.txt" "$tmp/m.txt" "$tmp/g.txt"; }

expect_fail() { # name, expected substring, command...
    local name=$1 want=$2; shift 2
    "$@" >"$tmp/o" 2>"$tmp/e"; local rc=$?
    if [ $rc -ge 1 ] && [ $rc -lt 128 ] && grep -q -- "$want" "$tmp/e"; then ok "$name"; else bad "$name (rc $rc: $(head -c 300 "$tmp/e"))"; fi
}
# a bf16 checkpoint of a bf16-pass family whose RoPE the bf16 pass does not compute (dynamic NTK here):
# the default falls back to f32 (an exact upcast), saying why; --dtype bf16 is refused at load
mkdir -p "$tmp/yarn" "$tmp/yarn_ok"
python3 - "$HF/llama_bf16" "$tmp/yarn" "$tmp/yarn_ok" <<'PY'
import json, os, sys
src, dst, ok = sys.argv[1], sys.argv[2], sys.argv[3]
c = json.load(open(src + '/config.json'))
c['rope_scaling'] = {'rope_type': 'dynamic', 'factor': 2.0}
json.dump(c, open(dst + '/config.json', 'w'))
os.symlink(os.path.abspath(src + '/model.safetensors'), dst + '/model.safetensors')
c['rope_scaling'] = {'rope_type': 'yarn', 'factor': 2.0, 'original_max_position_embeddings': 128}
json.dump(c, open(ok + '/config.json', 'w'))
os.symlink(os.path.abspath(src + '/model.safetensors'), ok + '/model.safetensors')
PY
"$CALDRIX" run "$tmp/yarn" --prompt-ids 5,6,7 -n 2 --temp 0 >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q "f32 compute \[checkpoint stored in bf16 or f16 of a family with a bf16 pass, but this model's RoPE scaling" "$tmp/err" &&
    ok "a bf16 checkpoint with dynamic RoPE scaling computes in f32 by default and says why" ||
    { bad "a bf16 checkpoint with dynamic RoPE scaling falls back to f32 (rc $rc)"; head -c 400 "$tmp/err"; }
"$CALDRIX" inspect "$tmp/yarn" >"$tmp/y.txt" 2>&1
grep -q "^  compute_dtype=f32 (checkpoint stored in bf16 or f16 of a family with a bf16 pass, but this model's RoPE scaling" "$tmp/y.txt" &&
    ! grep -q "picks another" "$tmp/y.txt" && ok "... and inspect names the same compute type, and offers no --dtype bf16" ||
    { bad "inspect agrees with run on the dynamic-RoPE checkpoint"; grep compute "$tmp/y.txt"; }
# YaRN is rotated by the bf16 pass (GPT-OSS's golden checks it): a bf16 checkpoint with YaRN computes in bf16
"$CALDRIX" run "$tmp/yarn_ok" --prompt-ids 5,6,7 -n 2 --temp 0 >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q "bf16 compute \[checkpoint stored in bf16 or f16" "$tmp/err" &&
    ok "a bf16 checkpoint with YaRN scaling computes in bf16" ||
    { bad "a bf16 checkpoint with YaRN scaling computes in bf16 (rc $rc)"; head -c 400 "$tmp/err"; }
expect_fail "--dtype bf16 on a checkpoint whose RoPE scaling the bf16 pass lacks is refused at load, saying why" \
    "dtype bf16: this model's RoPE (dynamic scaling" "$CALDRIX" run "$tmp/yarn" --dtype bf16 --prompt-ids 5
expect_fail "an unknown --dtype is named" 'expected auto, f32 or bf16' "$CALDRIX" run $HF/llama --dtype f64 --prompt-ids 5
expect_fail "--dtype bf16 on a GGUF file is refused, saying why" "applies to safetensors checkpoints" \
    "$CALDRIX" run ../shared/fixtures/hf-gguf/llama_bf16.gguf --dtype bf16 --prompt-ids 5
expect_fail "--dtype bf16 on the bundled GGUF is refused" "applies to safetensors checkpoints" "$CALDRIX" run --dtype bf16 --prompt-ids 5
expect_fail "--dtype bf16 on a family without a bf16 pass (BitNet) is refused" "no bf16 forward pass" \
    "$CALDRIX" run "$tmp/bitnet" --dtype bf16 --prompt-ids 5
expect_fail "... naming why (BitLinear's bf16 rounding is torch.compile's)" "under @torch.compile" \
    "$CALDRIX" run "$tmp/bitnet" --dtype bf16 --prompt-ids 5
expect_fail "--dtype bf16 with a weight budget on an f32 mixture of experts is refused, saying why" \
    "a bf16 copy of F32 or F16 experts would hold them all in memory" \
    "$CALDRIX" run $HF/qwen3_moe --dtype bf16 --weight-budget 700K --prompt-ids 5
expect_fail "an f16 cache with bf16 compute is refused" "expected f32 or bf16" \
    "$CALDRIX" run $HF/llama_bf16 --kv-type f16 --prompt-ids 5
expect_fail "a bf16 cache with f32 compute is refused" "expected f32 or f16" \
    "$CALDRIX" run $HF/llama_bf16 --dtype f32 --kv-type bf16 --prompt-ids 5
expect_fail "an unknown --kv-type is named" "--kv-type is" "$CALDRIX" run $HF/llama --kv-type q8 --prompt-ids 5

echo "dtype: $pass passed, $fail failed"
[ $fail -eq 0 ]
