#!/usr/bin/env bash
# serial: it times how fast rank 0 fails after a rank is killed, and runs mpirun ranks on both cores
# One model split by layers over Open MPI ranks (issue 41; docs/models.md, "One model over several
# machines"), on this machine's loopback: stories260K's tokens and top-5 logits are the same float
# bits whole and split over 2 and 3 ranks (and by --split-layers); the refusals (--nodes without
# --allow-split, mpirun without it, bad --split-layers, more ranks than layers, another build or
# another model on a rank) come from rank 0 before anything runs; a rank killed with kill -9 makes
# rank 0 fail naming the rank, in bounded time. Where mpirun is missing (or the build has no Open
# MPI) the split cases are skipped, and the result line says so.
set -u
cd "$(dirname "$0")/../.."
. tests/split/split_lib.sh
trap '' PIPE
M=models/stories260K.gguf
L=../shared/fixtures/hf/llama

# ---- without mpirun ----
"$CALDRIX" run "$M" -p hi -n 2 --nodes 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--nodes 2 without --allow-split: exit 2 naming the flag" '[ $rc -eq 2 ] && grep -q "add --allow-split" "$tmp/err"'
"$CALDRIX" run "$M" -p hi -n 2 --split-layers 0-4 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--split-layers without --allow-split: exit 2 naming the flag" '[ $rc -eq 2 ] && grep -q "add --allow-split" "$tmp/err"'
"$CALDRIX" run "$M" -p hi -n 2 --split-micro 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--split-micro without --allow-split: exit 2 naming the flag" '[ $rc -eq 2 ] && grep -q "split-micro shapes a split: add --allow-split" "$tmp/err"'
"$CALDRIX" run "$M" -p "Once upon a time" -n 24 --temp 0 --json --top-logits 5 >"$tmp/whole.json" 2>"$tmp/err"
"$CALDRIX" run "$M" -p "Once upon a time" -n 24 --temp 0 --json --top-logits 5 --allow-split >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--allow-split in one process runs whole: the same bits, no split in --json" \
    '[ $rc -eq 0 ] && same_bits "$tmp/whole.json" "$tmp/out" && ! grep -q "\"split\"" "$tmp/out"'

if [ "$HAVE_SPLIT" != 1 ]; then
    echo "skipped: the split over mpirun ranks: $WHY_NO_SPLIT"
    echo "$pass passed, $fail failed, 1 skipped"
    [ "$fail" -eq 0 ]; exit
fi

# ---- whole vs split ----
for np in 2 3; do
    timeout 60 $MPIRUN -np $np "$CALDRIX" run "$M" --allow-split --nodes $np --threads 1 -p "Once upon a time" -n 24 --temp 0 --json \
        --top-logits 5 >"$tmp/out" 2>"$tmp/err"; rc=$?
    check "stories260K over $np ranks: tokens and top-5 logits the same float bits as whole (24 steps)" \
        '[ $rc -eq 0 ] && same_bits "$tmp/whole.json" "$tmp/out" && python3 -c "import json,sys; s=json.load(open(sys.argv[1]))[\"timings\"][\"split\"]; sys.exit(not (s[\"ranks\"] == $np and s[\"bytes_sent\"] > 0))" "$tmp/out"'
done
timeout 60 $MPIRUN -np 2 "$CALDRIX" run "$M" --allow-split --split-layers 0-0,1-4 --threads 1 -p "Once upon a time" -n 24 \
    --temp 0 --json --top-logits 5 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--split-layers 0-0,1-4 by hand: rank 0 holds 1 layer, the same bits" \
    '[ $rc -eq 0 ] && same_bits "$tmp/whole.json" "$tmp/out" && grep -q "\"layers_rank0\":1" "$tmp/out"'

# ---- bench over a split: 4 streams, their prompts in micro-batches ----
"$CALDRIX" bench "$M" -t 1 -p 8 -n 8 -r 1 --parallel 4 --json >"$tmp/bw.json" 2>"$tmp/err"
timeout 60 $MPIRUN -np 2 "$CALDRIX" bench "$M" -t 1 --allow-split --nodes 2 -p 8 -n 8 -r 1 --parallel 4 --json \
    >"$tmp/out" 2>"$tmp/err"; rc=$?
check "bench --parallel 4 over 2 ranks (the 32-token prefill in 2 micro-batches): the greedy tokens of whole, what crossed reported" \
    '[ $rc -eq 0 ] && python3 -c "import json,sys; w,s=(json.load(open(p)) for p in sys.argv[1:3]); x=s[\"split\"]; sys.exit(not (w[\"greedy_tokens\"] == s[\"greedy_tokens\"] and len(w[\"greedy_tokens\"]) > 0 and x[\"micro\"] == 2 and x[\"bytes_sent\"] > 0 and x[\"tokens\"] == 64))" "$tmp/bw.json" "$tmp/out"'

"$CALDRIX" bench "$L" --dtype bf16 -t 1 -p 16 -n 8 -r 1 --parallel 4 --json >"$tmp/bw.json" 2>"$tmp/err"
timeout 60 $MPIRUN -np 2 "$CALDRIX" bench "$L" --dtype bf16 -t 1 --allow-split --nodes 2 -p 16 -n 8 -r 1 --parallel 4 --json \
    >"$tmp/out" 2>"$tmp/err"; rc=$?
check "bench --dtype bf16 --parallel 4 over 2 ranks (fixtures/hf/llama, the 64-token prefill in 2 micro-batches): the greedy tokens of whole" \
    '[ $rc -eq 0 ] && python3 -c "import json,sys; w,s=(json.load(open(p)) for p in sys.argv[1:3]); sys.exit(not (w[\"greedy_tokens\"] == s[\"greedy_tokens\"] and len(w[\"greedy_tokens\"]) > 0 and s[\"dtype\"] == \"bf16\" and s[\"split\"][\"micro\"] == 2))" "$tmp/bw.json" "$tmp/out"'

# ---- the pipeline across rounds: 8 decoding streams in 2 groups, rank 0 on one while rank 1 computes the other ----
"$CALDRIX" bench "$M" -t 1 -p 8 -n 24 -r 1 --parallel 8 --json >"$tmp/bw.json" 2>"$tmp/err"
for pl in on off; do
    timeout 60 $MPIRUN -np 2 "$CALDRIX" bench "$M" -t 1 --allow-split --nodes 2 --split-pipeline $pl -p 8 -n 24 -r 1 \
        --parallel 8 --json >"$tmp/out" 2>"$tmp/err"; rc=$?
    check "bench --parallel 8 over 2 ranks, --split-pipeline $pl: the greedy tokens of whole; rounds overlapped $([ $pl = on ] && echo "(2 groups)" || echo "none")" \
        '[ $rc -eq 0 ] && python3 -c "import json,sys; w,s=(json.load(open(p)) for p in sys.argv[1:3]); x=s[\"split\"]; on=sys.argv[3]==\"on\"; sys.exit(not (w[\"greedy_tokens\"] == s[\"greedy_tokens\"] and len(w[\"greedy_tokens\"]) > 0 and x[\"groups\"] == (2 if on else 0) and ((x[\"rounds_overlapped\"] >= 20) if on else (x[\"rounds_overlapped\"] == 0))))" "$tmp/bw.json" "$tmp/out" $pl'
done
timeout 60 $MPIRUN -np 3 "$CALDRIX" bench "$M" -t 1 --allow-split --nodes 3 -p 8 -n 24 -r 1 --parallel 8 --json >"$tmp/out" \
    2>"$tmp/err"; rc=$?
check "bench --parallel 8 over 3 ranks: 3 groups in flight, the greedy tokens of whole" \
    '[ $rc -eq 0 ] && python3 -c "import json,sys; w,s=(json.load(open(p)) for p in sys.argv[1:3]); x=s[\"split\"]; sys.exit(not (w[\"greedy_tokens\"] == s[\"greedy_tokens\"] and len(w[\"greedy_tokens\"]) > 0 and x[\"groups\"] == 3 and x[\"rounds_overlapped\"] >= 20))" "$tmp/bw.json" "$tmp/out"'
"$CALDRIX" run "$M" --allow-split --split-pipeline maybe -p hi -n 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--split-pipeline maybe: exit 2 naming the values" '[ $rc -eq 2 ] && grep -q "expected on or off" "$tmp/err"'
"$CALDRIX" run "$M" --split-pipeline off -p hi -n 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--split-pipeline without --allow-split: exit 2 naming the flag" '[ $rc -eq 2 ] && grep -q "split-pipeline shapes a split: add --allow-split" "$tmp/err"'

# ---- placement by memory: whole when rank 0 holds the model, else slices within each rank's --memory ----
timeout 60 $MPIRUN -np 2 "$CALDRIX" run "$M" --allow-split --threads 1 -p "Once upon a time" -n 24 --temp 0 --json \
    --top-logits 5 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "2 ranks, no --nodes, a model rank 0 holds: it runs whole (said, the same bits, no split in --json)" \
    '[ $rc -eq 0 ] && same_bits "$tmp/whole.json" "$tmp/out" && ! grep -q "\"split\"" "$tmp/out" && grep -q "rank 0 holds the whole model" "$tmp/err"'
# stories260K: 3.6 MiB in 5 layers (weights and a 2048-token KV cache), 0.72 MiB a layer; 1536K holds 2
timeout 60 $MPIRUN -np 3 "$CALDRIX" run "$M" --allow-split --memory 1536K --threads 1 -p "Once upon a time" -n 24 --temp 0 \
    --json --top-logits 5 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--memory 1536K on 3 ranks forces a 3-way split (2, 2 and 1 layers), the same bits" \
    '[ $rc -eq 0 ] && same_bits "$tmp/whole.json" "$tmp/out" && grep -q "\"ranks\":3,\"layers_rank0\":2" "$tmp/out"'
timeout 60 $MPIRUN -np 2 "$CALDRIX" run "$M" --allow-split --memory 1536K -p hi -n 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--memory 1536K on 2 ranks: refused before loading, it does not fit even split (both numbers, per rank)" \
    '[ $rc -eq 2 ] && grep -q "does not fit even split: it needs 3.6 MiB (5 layers of 740.8 KiB, weights and KV cache); the 2 ranks hold 4 layers together (rank 0 1.5 MiB, rank 1 1.5 MiB)" "$tmp/err"'
timeout 60 $MPIRUN -np 2 "$CALDRIX" run "$M" --allow-split --memory 1536K --split-layers 0-3,4-4 -p hi -n 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--split-layers 0-3,4-4 with --memory 1536K: refused, the slice of rank 0 does not fit (both numbers)" \
    '[ $rc -eq 2 ] && grep -q "gives rank 0 layers 0-3, 2.9 MiB (740.8 KiB a layer, weights and KV cache); it gives 1.5 MiB" "$tmp/err"'
"$CALDRIX" run "$M" -p hi -n 2 --memory 1G >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--memory without --allow-split: exit 2 naming the flag" '[ $rc -eq 2 ] && grep -q "\-\-memory shapes a split: add --allow-split" "$tmp/err"'

# ---- refusals, from rank 0 before loading ----
timeout 60 $MPIRUN -np 2 "$CALDRIX" run "$M" -p hi -n 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "mpirun -np 2 without --allow-split: refused naming the flag" '[ $rc -ne 0 ] && grep -q "add --allow-split to split" "$tmp/err"'
refuse() { # $1: what, $2: -np, $3: --split-layers spec or "", $4: model, $5: expected text
    local extra=(--nodes "$2") want="$5"; [ -n "$3" ] && extra=(--split-layers "$3")
    timeout 60 $MPIRUN -np "$2" "$CALDRIX" run "$4" --allow-split "${extra[@]}" --prompt-ids 5,6,7 -n 2 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    check "$1: exit 2, saying \"$5\"" '[ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/err" && [ $(grep -c "caldrix run:" "$tmp/err") -eq 1 ]'
}
refuse "--split-layers 0-2,2-4 (overlap)" 2 0-2,2-4 "$M" "range 2-4 overlaps the one before (layer 2 is in both)"
refuse "--split-layers 0-1,3-4 (a gap)" 2 0-1,3-4 "$M" "range 3-4 leaves a gap (layer 2 in no range)"
refuse "--split-layers 0-2,3-7 (no such layer)" 2 0-2,3-7 "$M" "range 3-7 names layer 7; the model has layers 0-4"
refuse "--split-layers 0-1.5,2-4 (inside a layer)" 2 0-1.5,2-4 "$M" "is not a layer range a-b"
refuse "--split-layers 0-4 for 2 ranks" 2 0-4 "$M" "gives 1 ranges for the 2 ranks"
refuse "4 ranks for a 3-layer model (--nodes 4)" 4 "" "$L" "4 ranks for a model of 3 layers"
timeout 60 $MPIRUN -np 2 "$CALDRIX" run "$M" --allow-split --nodes 3 -p hi -n 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "--nodes 3 under mpirun -np 2: exit 2 naming both" '[ $rc -eq 2 ] && grep -q "\-\-nodes 3, but mpirun started 2 ranks" "$tmp/err"'
# another build on rank 1: the same binary with another GNU build id
cp "$CALDRIX" "$tmp/caldrix2"
python3 - "$tmp/caldrix2" "$(readelf -n "$CALDRIX" | sed -n 's/.*Build ID: //p')" <<'PY'
import sys
p, bid = sys.argv[1], bytes.fromhex(sys.argv[2])
b = bytearray(open(p, 'rb').read()); i = b.find(bid); b[i] ^= 0xff; open(p, 'wb').write(b)
PY
timeout 60 $MPIRUN -np 1 "$CALDRIX" run "$M" --allow-split -p hi -n 2 : -np 1 "$tmp/caldrix2" run "$M" --allow-split -p hi -n 2 \
    >"$tmp/out" 2>"$tmp/err"; rc=$?
check "another build on rank 1: refused before loading, naming rank 1" \
    '[ $rc -eq 2 ] && grep -q "rank 1 (host .*) runs another build of caldrix than rank 0" "$tmp/err"'
timeout 60 $MPIRUN -np 1 "$CALDRIX" run "$L" --allow-split --nodes 2 --prompt-ids 5,6 -n 2 : -np 1 "$CALDRIX" run "${L}_f16" --allow-split --nodes 2 \
    --prompt-ids 5,6 -n 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "another model on rank 1 (its fingerprint): refused naming rank 1" \
    '[ $rc -ne 0 ] && grep -q "rank 1 (host .*): its model is not rank 0.s (the model fingerprints differ)" "$tmp/err"'
timeout 60 $MPIRUN -np 2 "$CALDRIX" run ../shared/fixtures/hf/qwen3_5 --allow-split --nodes 2 --prompt-ids 5,6 -n 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "Qwen3.5 (recurrent state): refused by name, no hang" '[ $rc -ne 0 ] && grep -q "recurrent state.*not done yet" "$tmp/err"'

# ---- a rank killed (kill -9) between two turns of run -i: rank 0 names it, nothing hangs ----
kill_rank1() { # $1: extra mpirun flags; sets elapsed
    rm -f "$tmp/fifo"; mkfifo "$tmp/fifo"
    ( timeout 90 $MPIRUN $1 -np 2 "$CALDRIX" run "$M" --allow-split --nodes 2 -i --json -n 8 --temp 0 --threads 1 --split-timeout 20 \
        <"$tmp/fifo" >"$tmp/out" 2>"$tmp/err"; echo $? >"$tmp/rc" ) &
    local bg=$! p pid="" i
    exec 7>"$tmp/fifo"
    echo "Once upon a time" >&7
    for i in $(seq 600); do [ -s "$tmp/out" ] && break; sleep 0.1; done # the first turn answered: every rank is up
    for i in $(seq 50); do pid=$(rank_pid $bg 1); [ -n "$pid" ] && break; sleep 0.1; done
    local t0=$SECONDS
    [ -n "$pid" ] && kill -9 "$pid"
    sleep 0.5
    echo "The end" >&7 2>/dev/null
    exec 7>&-
    wait $bg
    elapsed=$((SECONDS - t0))
}
kill_rank1 "--enable-recovery"
check "mpirun --enable-recovery, rank 1 killed: rank 0 fails the next turn with split_rank_lost naming rank 1 and its pid, in ${elapsed} s" \
    '[ $elapsed -lt 30 ] && grep -q "^caldrix: split_rank_lost: rank 1 (pid [0-9]*) of the split is gone" "$tmp/err" && [ $(wc -l <"$tmp/out") -eq 1 ]'
kill_rank1 ""
check "plain mpirun, rank 1 killed: the job ends non-zero naming rank 1 (mpirun aborts it), in ${elapsed} s" \
    '[ $elapsed -lt 30 ] && [ "$(cat "$tmp/rc")" -ne 0 ] && grep -q "process rank 1 .*signal 9" "$tmp/err"'

# ---- a rank killed while two groups of 8 decoding streams are in flight: the requests fail naming it, nothing hangs ----
( timeout 90 $MPIRUN --enable-recovery -np 2 "$CALDRIX" bench "$M" -t 1 --allow-split --nodes 2 --split-timeout 20 -p 8 -n 400 \
    -r 100 --parallel 8 >"$tmp/out" 2>"$tmp/err"; echo $? >"$tmp/rc" ) &
bg=$!
pid=""
for i in $(seq 100); do pid=$(rank_pid $bg 1); [ -n "$pid" ] && break; sleep 0.1; done
sleep 3 # loaded, warmed up, decoding in 2 groups
t0=$SECONDS
[ -n "$pid" ] && kill -9 "$pid"
wait $bg
elapsed=$((SECONDS - t0))
check "rank 1 killed (pid ${pid:-?}) with 2 groups in flight: bench fails with split_rank_lost naming rank 1, in ${elapsed} s" \
    '[ -n "$pid" ] && [ $elapsed -lt 30 ] && grep -q "split_rank_lost: rank 1 (pid $pid) of the split is gone" "$tmp/err"'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
