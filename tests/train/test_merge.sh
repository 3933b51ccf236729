#!/usr/bin/env bash
# caldrix convert --merge-lora (issue 42 item 1's merged checkpoint) against ../shared/fixtures/train:
# each case's final adapter merged into its base gives merged/model.safetensors (PyTorch's W + s·B@A in
# float32) within 1e-5 on every tensor, and the merged folder runs to merged/golden.json's greedy tokens;
# :0 leaves the base's tensors; a GGUF base and an adapter of another model are refused (exit 2).
set -u
CALDRIX=${CALDRIX:-build/caldrix}; CALDRIX=$(cd "$(dirname "$CALDRIX")" && pwd)/$(basename "$CALDRIX")
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; echo "  err: $(tail -c 400 "$tmp/err")"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
TR=../shared/fixtures/train; HF=../shared/fixtures/hf
[ -f $TR/README.md ] || { echo "0 passed, 1 failed (no fixtures in $TR)"; exit 1; }
stdiff() { python3 - "$@" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    return {k: (v['shape'], struct.unpack('<%df' % ((v['data_offsets'][1] - v['data_offsets'][0]) // 4),
            b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]])) for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(a) == sorted(b), 'names differ'
print(max(max(abs(x - y) for x, y in zip(a[k][1], b[k][1])) if a[k][0] == b[k][0] else 1e9 for k in a))
PY
}
le() { python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$1" "$2" 2>/dev/null; }
for spec in "llama lora_llama adapter_step30" "qwen3 lora_qwen3_all adapter_step20" "llama distill adapter_step20"; do
    set -- $spec
    "$CALDRIX" convert $HF/$1 "$tmp/$2" --merge-lora $TR/$2/$3 >"$tmp/out" 2>"$tmp/err"; rc=$?
    d=$(stdiff "$tmp/$2/model.safetensors" $TR/$2/merged/model.safetensors)
    check "$2: merged tensors within 1e-5 of PyTorch's merged/ (max $d)" '[ $rc -eq 0 ] && le "$d" 1e-5'
    g=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['cases'][0]; print(','.join(map(str,c['prompt_ids']))+'|'+','.join(str(s['token']) for s in c['steps']))" $TR/$2/merged/golden.json)
    "$CALDRIX" run "$tmp/$2" --prompt-ids "${g%|*}" -n 16 --temp 0 --json >"$tmp/run" 2>"$tmp/err"; rc=$?
    check "$2: the merged folder gives merged/golden.json's tokens" \
        '[ $rc -eq 0 ] && [ "$(python3 -c "import json,sys; print(\",\".join(map(str,json.load(open(sys.argv[1]))[\"tokens\"])))" "$tmp/run")" = "${g#*|}" ]'
done
"$CALDRIX" convert $HF/llama "$tmp/zero" --merge-lora $TR/lora_llama/adapter_step30:0 >"$tmp/out" 2>"$tmp/err"; rc=$?
d=$(stdiff "$tmp/zero/model.safetensors" $HF/llama/model.safetensors)
check "--merge-lora DIR:0 leaves every tensor of the base (max $d)" '[ $rc -eq 0 ] && le "$d" 0'
"$CALDRIX" convert ../shared/models/stories260K/stories260K.gguf "$tmp/x" --merge-lora $TR/lora_llama/adapter_step30 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "a GGUF base: refused (exit 2)" '[ $rc -eq 2 ]'
"$CALDRIX" convert $HF/qwen3 "$tmp/x" --merge-lora $TR/lora_llama/adapter_step30 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "a llama adapter on qwen3: refused naming the first mismatch (exit 2)" '[ $rc -eq 2 ] && grep -q "q_proj" "$tmp/err"'
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
