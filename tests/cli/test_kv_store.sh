#!/usr/bin/env bash
# caldrix run --kv-store: the prefix store survives the process. A second run of the same prompt
# reads the stored blocks (cached_tokens in --json timings) and gives the same tokens and logits to
# the last bit; a prompt sharing a prefix reads that much; every kind of bad file (truncated,
# corrupt, another model's, another block's) is refused, deleted, and the answer is unchanged.
set -u
cd "$(dirname "$0")/../.."
CALDRIX=${CALDRIX:-build/caldrix}
M=../shared/models/stories260K/stories260K.gguf
OTHER=../shared/fixtures/hf-gguf/llama.gguf
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
S=$tmp/store
ids=$(python3 -c "print(','.join(str(1 + (i * 37) % 500) for i in range(70)))")
half=$(python3 -c "print(','.join([str(1 + (i * 37) % 500) for i in range(40)] + ['7'] * 30))")
run() { "$CALDRIX" run "$M" --prompt-ids "$1" -n 8 --temp 0 --ignore-eos --json --top-logits 5 --kv-store "$S" >"$2" 2>"$2.err"; }
# same: tokens and every top logit equal (JSON reals are printed exactly); $3: cached tokens wanted
same() {
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
good = a['tokens'] == b['tokens'] and a['steps'] == b['steps'] and b['timings']['cached_tokens'] == int(sys.argv[3])
if not good:
    print('   ', a['tokens'], b['tokens'], b['timings']['cached_tokens'])
sys.exit(0 if good else 1)
PY
}
nfiles() { ls "$S" | grep -c '\.kvb$'; }

run "$ids" "$tmp/cold.json"
[ "$(python3 -c "import json; print(json.load(open('$tmp/cold.json'))['timings']['cached_tokens'])")" = 0 ] && [ "$(nfiles)" = 4 ] &&
    ok "a first run computes everything and stores its 4 full blocks" || bad "a first run stores 4 blocks ($(nfiles))"
run "$ids" "$tmp/warm.json"
same "$tmp/cold.json" "$tmp/warm.json" 64 && ok "a new process reads 64 stored positions and gives the same bits" ||
    bad "a new process reads the stored prefix and gives the same bits"
run "$half" "$tmp/half.json"
"$CALDRIX" run "$M" --prompt-ids "$half" -n 8 --temp 0 --ignore-eos --json --top-logits 5 >"$tmp/half0.json" 2>/dev/null
same "$tmp/half0.json" "$tmp/half.json" 32 && ok "a prompt sharing 40 tokens reads the 32 of whole blocks" ||
    bad "a prompt sharing a prefix reads its whole blocks"

sizes() { for f in "$S"/*.kvb; do stat -c %s "$f"; done | sort | uniq -c | tr -s ' '; }
good_size=$(stat -c %s "$(ls "$S"/*.kvb | head -1)")
# truncated files
for f in "$S"/*.kvb; do head -c 100 "$f" >"$f.x" && mv "$f.x" "$f"; done
run "$ids" "$tmp/t.json"
same "$tmp/cold.json" "$tmp/t.json" 0 && ok "truncated files are refused (nothing cached, same answer)" || bad "truncated files are refused"
[ "$(stat -c %s "$(ls "$S"/*.kvb | head -1)")" = "$good_size" ] && ok "refused files are deleted and written anew" ||
    bad "refused files are deleted and written anew"
# a flipped byte in every payload
for f in "$S"/*.kvb; do
    python3 -c "
import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2] ^= 0x40; open(p,'wb').write(bytes(b))" "$f"
done
run "$ids" "$tmp/c.json"
same "$tmp/cold.json" "$tmp/c.json" 0 && ok "corrupt payloads are refused" || bad "corrupt payloads are refused"
# one block's file under another block's name
files=($(ls "$S"/*.kvb))
cp "${files[0]}" "$tmp/keep0"; cp "${files[1]}" "${files[0]}"
run "$ids" "$tmp/k.json"
python3 -c "import json,sys; sys.exit(0 if json.load(open('$tmp/k.json'))['timings']['cached_tokens'] < 64 else 1)" &&
    same "$tmp/cold.json" "$tmp/k.json" "$(python3 -c "import json; print(json.load(open('$tmp/k.json'))['timings']['cached_tokens'])")" &&
    ok "a file under another block's key is refused" || bad "a file under another block's key is refused"
# another model's blocks under this model's names
"$CALDRIX" run "$OTHER" --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20 -n 2 --temp 0 --json --kv-store "$tmp/other" >/dev/null 2>&1
o=$(ls "$tmp"/other/*.kvb | head -1)
[ -n "$o" ] || bad "the other model stored a block"
for f in "$S"/*.kvb; do cp "$o" "$f"; done
run "$ids" "$tmp/o.json"
same "$tmp/cold.json" "$tmp/o.json" 0 && ok "another model's files are refused" || bad "another model's files are refused"
run "$ids" "$tmp/again.json"
same "$tmp/cold.json" "$tmp/again.json" 64 && ok "after the bad files, the store is whole again" || bad "after the bad files, the store is whole again"
# another KV type: its blocks have other keys, and its files under this type's names are refused
before=$(nfiles)
"$CALDRIX" run "$M" --prompt-ids "$ids" -n 8 --temp 0 --ignore-eos --json --top-logits 5 --kv-store "$S" --kv-type f16 >"$tmp/h1.json" 2>/dev/null
"$CALDRIX" run "$M" --prompt-ids "$ids" -n 8 --temp 0 --ignore-eos --json --top-logits 5 --kv-store "$S" --kv-type f16 >"$tmp/h2.json" 2>/dev/null
python3 -c "
import json,sys; a=json.load(open('$tmp/h1.json')); b=json.load(open('$tmp/h2.json'))
sys.exit(0 if a['timings']['cached_tokens']==0 and b['timings']['cached_tokens']==64 and a['tokens']==b['tokens'] and a['steps']==b['steps'] else 1)" &&
    ok "an f16 cache keeps its own blocks beside the f32 ones" || bad "an f16 cache keeps its own blocks beside the f32 ones"
[ "$(nfiles)" = $((before + 4)) ] && ok "the f16 run stored 4 files of its own" || bad "the f16 run stored 4 files of its own ($before, then $(nfiles))"
h=$(ls -S "$S"/*.kvb | tail -1) # the smaller files are f16
for f in $(ls -S "$S"/*.kvb | head -4); do cp "$h" "$f"; done
run "$ids" "$tmp/h3.json"
same "$tmp/cold.json" "$tmp/h3.json" 0 && ok "an f16 file under an f32 block's name is refused" || bad "an f16 file under an f32 block's name is refused"
# garbage and empty files, and stray names, are harmless
for f in "$S"/*.kvb; do : >"$f"; done
echo junk >"$S/notes.txt"
run "$ids" "$tmp/e.json"
same "$tmp/cold.json" "$tmp/e.json" 0 && ok "empty files are refused" || bad "empty files are refused"
# the store must be a directory that can be written
: >"$tmp/plain"
"$CALDRIX" run "$M" --prompt-ids 1,2,3 -n 2 --kv-store "$tmp/plain" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "not a directory" "$tmp/err" && ok "--kv-store on a plain file is refused by name" ||
    bad "--kv-store on a plain file is refused by name (rc $rc)"
# Qwen3.5 (hybrid): the blocks carry the recurrent-state snapshot taken at the prompt's last block
# boundary; a new process resumes from it with the same bits; a snapshot cut short is refused
Q=../shared/fixtures/hf/qwen3_5
S=$tmp/qstore
qids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$Q/golden.json'))['cases'][2]['prompt_ids'])))")
qrun() { "$CALDRIX" run "$Q" --prompt-ids "$qids" -n 8 --temp 0 --ignore-eos --json --top-logits 5 ${2:+--kv-store "$S"} >"$1" 2>"$1.err"; }
qrun "$tmp/q0.json"
qrun "$tmp/qc.json" store
qrun "$tmp/qw.json" store
same "$tmp/q0.json" "$tmp/qc.json" 0 && same "$tmp/q0.json" "$tmp/qw.json" 64 &&
    ok "qwen3_5: a new process resumes 64 of 70 prompt positions from the stored KV and state snapshot, same bits" ||
    bad "qwen3_5: a new process resumes from the stored state snapshot with the same bits"
big=$(ls -S "$S"/*.kvb | head -1)
[ "$(ls "$S" | grep -c '\.kvb$')" = 4 ] && [ "$(stat -c %s "$big")" -gt "$(stat -c %s "$(ls -S "$S"/*.kvb | tail -1)")" ] &&
    ok "qwen3_5: 4 blocks stored, the one at the prompt's boundary with its state snapshot" ||
    bad "qwen3_5: 4 blocks stored, one with a state snapshot"
head -c $(( $(stat -c %s "$big") - 100 )) "$big" >"$tmp/cut" && cp "$tmp/cut" "$big"
qrun "$tmp/qx.json" store
# (cached 0: refused; at exit the engine writes the recomputed block back whole)
same "$tmp/q0.json" "$tmp/qx.json" 0 && { [ ! -e "$big" ] || [ "$(stat -c %s "$big")" -gt "$(stat -c %s "$tmp/cut")" ]; } &&
    ok "qwen3_5: a snapshot cut short is refused and deleted; the prefix is recomputed with the same bits" ||
    bad "qwen3_5: a snapshot cut short is refused and deleted"
echo "kv_store: $pass passed, $fail failed"
[ $fail -eq 0 ]
