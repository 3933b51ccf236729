#!/usr/bin/env bash
# caldrix quantize / convert refuse an OUT that would destroy their input or that cannot be written,
# before any work: the input itself, a hard link or symlink to it, a file of the input checkpoint,
# a folder that does not exist, one that is not writable. Each refusal exits 2 and leaves the input
# as it was; a good OUT still works and leaves no probe file behind.
set -u
CALDRIX=${CALDRIX:-build/caldrix}; CALDRIX=$(cd "$(dirname "$CALDRIX")" && pwd)/$(basename "$CALDRIX")
pass=0; fail=0; skip=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; echo "  stderr: $(head -c 400 "$tmp/err")"; fi; }
tmp=$(mktemp -d); trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
HF=../shared/fixtures/hf

cp models/stories260K.gguf "$tmp/a.gguf"
sum0=$(sha256sum <"$tmp/a.gguf")
same() { [ "$(sha256sum <"$tmp/a.gguf")" = "$sum0" ]; }
# no work was done: no per-tensor progress ("[1/N] ..."), no conversion, nothing written
nowork() { ! grep -qE '^\[|\[[0-9]+/[0-9]+\]|converting it|wrote' "$tmp/err"; }

"$CALDRIX" quantize "$tmp/a.gguf" "$tmp/a.gguf" Q8_0 2>"$tmp/err"; rc=$?
check "quantize a.gguf a.gguf exits 2 before any work and leaves the input" \
    '[ $rc -eq 2 ] && grep -q "is the input" "$tmp/err" && nowork && same'
"$CALDRIX" quantize "$tmp/a.gguf" "$tmp/./a.gguf" Q8_0 2>"$tmp/err"; rc=$?
check "the same file by another path is refused" '[ $rc -eq 2 ] && grep -q "is the input" "$tmp/err" && same'
ln "$tmp/a.gguf" "$tmp/hard.gguf"
"$CALDRIX" quantize "$tmp/a.gguf" "$tmp/hard.gguf" Q4_0 2>"$tmp/err"; rc=$?
check "a hard link to the input is refused" '[ $rc -eq 2 ] && grep -q "the same file" "$tmp/err" && nowork && same'
ln -s a.gguf "$tmp/sym.gguf"
"$CALDRIX" quantize "$tmp/sym.gguf" "$tmp/a.gguf" Q4_0 2>"$tmp/err"; rc=$?
check "a symlink to the input is refused" '[ $rc -eq 2 ] && grep -q "the same file" "$tmp/err" && same'

"$CALDRIX" quantize "$tmp/a.gguf" "$tmp/no/such/dir/x.gguf" Q8_0 2>"$tmp/err"; rc=$?
check "quantize into a folder that does not exist exits 2 before any work" \
    '[ $rc -eq 2 ] && grep -q "$tmp/no/such/dir does not exist" "$tmp/err" && nowork && [ ! -e "$tmp/no" ]'
"$CALDRIX" quantize "$tmp/a.gguf" "$tmp/a.gguf/x.gguf" Q8_0 2>"$tmp/err"; rc=$?
check "a file in place of the folder is refused" '[ $rc -eq 2 ] && grep -q "not a folder" "$tmp/err" && nowork && same'
mkdir "$tmp/outdir"
"$CALDRIX" quantize "$tmp/a.gguf" "$tmp/outdir" Q8_0 2>"$tmp/err"; rc=$?
check "OUT that is a folder is refused" '[ $rc -eq 2 ] && grep -q "is a directory" "$tmp/err" && nowork'

mkdir "$tmp/ro"; chmod 555 "$tmp/ro"
if touch "$tmp/ro/probe" 2>/dev/null; then
    rm -f "$tmp/ro/probe"; skip=$((skip+1))
    echo "skip - a folder that is not writable (this user writes to a mode-555 folder anyway: root)"
else
    "$CALDRIX" quantize "$tmp/a.gguf" "$tmp/ro/x.gguf" Q8_0 2>"$tmp/err"; rc=$?
    check "quantize into a folder that is not writable exits 2 before any work" \
        '[ $rc -eq 2 ] && grep -q "cannot create a file in the folder $tmp/ro" "$tmp/err" && nowork'
    "$CALDRIX" convert "$HF/llama" "$tmp/ro/x.gguf" 2>"$tmp/err"; rc=$?
    check "convert into a folder that is not writable exits 2 before any work" \
        '[ $rc -eq 2 ] && grep -q "cannot create a file" "$tmp/err" && nowork'
fi

# convert: the checkpoint's own files, and a missing folder
cp -r "$HF/llama" "$tmp/ck"
st0=$(sha256sum <"$tmp/ck/model.safetensors")
"$CALDRIX" convert "$tmp/ck" "$tmp/ck/model.safetensors" 2>"$tmp/err"; rc=$?
check "convert onto a file of the checkpoint is refused and leaves it" \
    '[ $rc -eq 2 ] && grep -q "a file of the input checkpoint" "$tmp/err" && nowork && [ "$(sha256sum <"$tmp/ck/model.safetensors")" = "$st0" ]'
"$CALDRIX" convert "$tmp/ck" "$tmp/nodir/x.gguf" 2>"$tmp/err"; rc=$?
check "convert into a folder that does not exist exits 2 before any work" \
    '[ $rc -eq 2 ] && grep -q "$tmp/nodir does not exist" "$tmp/err" && nowork'
"$CALDRIX" quantize "$tmp/ck" "$tmp/nodir/x.gguf" Q8_0 2>"$tmp/err"; rc=$?
check "quantize of a checkpoint folder into a missing folder converts nothing" \
    '[ $rc -eq 2 ] && nowork && ! ls "$tmp" | grep -q f32-'
"$CALDRIX" quantize "$tmp/ck" "$tmp/ck/config.json" Q8_0 2>"$tmp/err"; rc=$?
check "quantize onto a file of the checkpoint folder is refused" '[ $rc -eq 2 ] && grep -q "a file of the input" "$tmp/err"'

# a good OUT still works, and the check leaves no probe file
mkdir "$tmp/good"
"$CALDRIX" quantize "$tmp/a.gguf" "$tmp/good/q.gguf" Q8_0 2>"$tmp/err"; rc=$?
check "quantize to a new file in a writable folder works and leaves only that file" \
    '[ $rc -eq 0 ] && [ "$(ls -A "$tmp/good")" = "q.gguf" ] && same'
(cd "$tmp/good" && "$CALDRIX" quantize ../a.gguf q2.gguf Q8_0 2>"$tmp/err"); rc=$?
check "a bare OUT name goes into the current folder" '[ $rc -eq 0 ] && [ -s "$tmp/good/q2.gguf" ]'
"$CALDRIX" convert "$tmp/ck" "$tmp/good/c.gguf" 2>"$tmp/err"; rc=$?
check "convert to a new file works" '[ $rc -eq 0 ] && [ -s "$tmp/good/c.gguf" ] && ! ls -A "$tmp/good" | grep -q probe'
"$CALDRIX" quantize --help | grep -q "OUT must not be IN" && ok "quantize --help states the refusal" || bad "quantize --help states the refusal"
"$CALDRIX" convert --help | grep -q "OUT must not be a file of HFDIR" && ok "convert --help states the refusal" || bad "convert --help states the refusal"

if [ $skip -gt 0 ]; then echo "output_paths: $pass passed, $fail failed, $skip skipped"; else echo "output_paths: $pass passed, $fail failed"; fi
[ $fail -eq 0 ]
