#!/usr/bin/env bash
# caldrix quantize of a Hugging Face checkpoint directory: the same file as converting it to F32
# (itself bit-identical to llama.cpp's converter, tests/cli/test_convert.sh) and quantizing that
# (byte-identical to ggml's quantizers, tests/cli/test_quant_llamacpp.sh); no temporary file left.
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
HF=../shared/fixtures/hf
for m in llama qwen3; do
    for t in Q8_0 Q4_K_M; do
        "$CALDRIX" quantize "$HF/$m" "$tmp/direct.gguf" $t >/dev/null 2>"$tmp/err"; rc=$?
        "$CALDRIX" convert "$HF/$m" "$tmp/f32.gguf" --type F32 >/dev/null 2>&1 &&
            "$CALDRIX" quantize "$tmp/f32.gguf" "$tmp/twostep.gguf" $t >/dev/null 2>&1
        if [ $rc = 0 ] && cmp -s "$tmp/direct.gguf" "$tmp/twostep.gguf"; then
            ok "quantize $m directory $t = convert F32 + quantize"
        else
            bad "quantize $m directory $t = convert F32 + quantize (rc $rc)"; cat "$tmp/err"
        fi
        left=$(ls "$tmp" | grep -c 'f32-' || true)
        [ "$left" = 0 ] && ok "no temporary file left ($m $t)" || bad "no temporary file left ($m $t)"
        rm -f "$tmp/direct.gguf" "$tmp/twostep.gguf" "$tmp/f32.gguf"
    done
done
# a directory that is not a checkpoint: refused, nothing left behind
mkdir -p "$tmp/empty"
"$CALDRIX" quantize "$tmp/empty" "$tmp/out.gguf" Q8_0 >/dev/null 2>"$tmp/err"; rc=$?
[ $rc != 0 ] && grep -q "config.json" "$tmp/err" && [ ! -e "$tmp/out.gguf" ] && [ -z "$(ls "$tmp" | grep 'f32-')" ] &&
    ok "a directory without config.json is refused" || { bad "a directory without config.json is refused (rc $rc)"; cat "$tmp/err"; }
echo "quantize-hf: $pass passed, $fail failed"
[ $fail -eq 0 ]
