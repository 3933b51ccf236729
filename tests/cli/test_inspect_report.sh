#!/usr/bin/env bash
# Issue 35 item 12: inspect's report has no stray "gpt" before family=; inspect --json on a file it
# cannot read prints a JSON error object on stdout (exit 1); a 0-byte, a 3-byte and a non-GGUF file
# get the same message from run and inspect; byte counts are IEC (KiB, MiB, GiB) everywhere.
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
MODEL=../shared/models/stories260K/stories260K.gguf

"$CALDRIX" inspect "$MODEL" >"$tmp/r" 2>&1
grep -q "^  family=llama layers=" "$tmp/r" && ! grep -q "gpt" "$tmp/r" && ok "inspect: family= with no gpt prefix" || { bad "inspect: family= line"; cat "$tmp/r"; }
grep -qE "estimated_memory=[0-9.]+ (B|KiB|MiB|GiB) \(weights [0-9.]+ (B|KiB|MiB|GiB) \+ KV cache [0-9.]+ (B|KiB|MiB|GiB)" "$tmp/r" &&
    ok "inspect: sizes in IEC units" || { bad "inspect: sizes in IEC units"; cat "$tmp/r"; }

: >"$tmp/empty.gguf"; printf 'GGU' >"$tmp/three.gguf"; echo hello >"$tmp/text.gguf"
for f in empty three text; do
    "$CALDRIX" run "$tmp/$f.gguf" -p hi -n 1 >/dev/null 2>"$tmp/run.err"; rr=$?
    "$CALDRIX" inspect "$tmp/$f.gguf" >"$tmp/ins.out" 2>"$tmp/ins.err"; ri=$?
    "$CALDRIX" inspect "$tmp/$f.gguf" --json >"$tmp/j.out" 2>/dev/null; rj=$?
    m_run=$(grep "not a GGUF file" "$tmp/run.err" | sed 's/^caldrix[a-z ]*: //'); m_ins=$(sed 's/^caldrix[a-z ]*: //' "$tmp/ins.err")
    [ $rr = 1 ] && [ $ri = 1 ] && [ -n "$m_run" ] && [ "$m_run" = "$m_ins" ] && ok "$f file: run and inspect say the same: $m_ins" ||
        bad "$f file: run ($rr) \"$m_run\" vs inspect ($ri) \"$m_ins\""
    [ $rj = 1 ] && python3 -c "import json,sys; d=json.load(open('$tmp/j.out')); sys.exit(0 if d['error']['message'] == sys.argv[1] and d['error']['ref'] == '$tmp/$f.gguf' else 1)" "$m_ins" &&
        ok "$f file: inspect --json prints {error: {ref, message}} on stdout, exit 1" || { bad "$f file: inspect --json (rc $rj)"; cat "$tmp/j.out"; }
done
grep -q "it is empty" <<<"$(cat "$tmp/ins.err")$( "$CALDRIX" inspect "$tmp/empty.gguf" 2>&1)" && ok "a 0-byte file is called empty" || bad "a 0-byte file is called empty"

# one byte formatter: CALDRIX_MEM_AVAILABLE=3G (3 x 2^30, as --weight-budget reads it) is 3.00 GiB
CALDRIX_MEM_AVAILABLE=3G "$CALDRIX" doctor >"$tmp/doc" 2>&1
grep -q "3.00 GiB" "$tmp/doc" && ! grep -qE "[0-9] (kB|MB|GB)\b" "$tmp/doc" && ok "doctor: 3G is 3.00 GiB, no decimal units" || { bad "doctor units"; cat "$tmp/doc"; }
echo "inspect_report: $pass passed, $fail failed"
[ $fail -eq 0 ]
