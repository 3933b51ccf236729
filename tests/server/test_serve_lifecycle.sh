#!/usr/bin/env bash
# caldrix serve's start and stop. Start: every option is checked against the engine's one table of
# ranges and the model is loaded and the engine made before "listening on": a bad option exits 2
# naming the option and the value, a model that cannot load exits 1, and neither ever printed
# "listening on"; the engine's top of a range is the command line's; --ctx past the trained length
# warns as run does; --threads has one range in run, bench, serve, quantize and synth. Stop: SIGINT
# and SIGTERM end an open stream with an error event and [DONE], answer a request waiting for its
# whole answer with a 503 JSON error, and the process exits 0 within seconds.
# isa-neutral: start, readiness and shutdown
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
S260=../shared/models/stories260K/stories260K.gguf

# refused NAME WANT_STATUS TEXT... -- ARGS: caldrix serve ARGS exits WANT_STATUS, its stderr holds
# every TEXT, and it never said it was listening
refused() {
    local name=$1 want=$2; shift 2
    local texts=()
    while [ "$1" != -- ]; do texts+=("$1"); shift; done
    shift
    timeout 120 "$CALDRIX" serve --host 127.0.0.1 --port 0 "$@" >"$tmp/r.out" 2>"$tmp/r.err"
    local rc=$? okay=1
    [ "$rc" = "$want" ] || okay=0
    for t in "${texts[@]}"; do grep -qF -- "$t" "$tmp/r.err" || okay=0; done
    grep -q "listening on" "$tmp/r.err" && okay=0
    if [ $okay = 1 ]; then ok "$name: exit $rc before listening, says ${texts[*]}"; else bad "$name: exit $rc (want $want)"; cat "$tmp/r.err"; fi
}

# ---- start: options from the engine's table, checked before listening ----
refused "--max-batch past the engine's 1024" 2 --max-batch '"4096"' '[1, 1024]' -- --max-batch 4096
refused "--max-batch 0" 2 --max-batch '"0"' -- --max-batch 0
refused "--kv-blocks 100000000" 2 --kv-blocks '"100000000"' -- --kv-blocks 100000000
refused "a missing model file" 1 "$tmp/no-such-model.gguf" -- "$tmp/no-such-model.gguf"
printf 'not a model' >"$tmp/junk.gguf"
refused "a file that is no GGUF" 1 "junk.gguf" -- "$tmp/junk.gguf"
refused "--host that does not resolve" 2 'no-such-host.invalid' -- --host no-such-host.invalid
# the pool's full size against this machine's memory: stories260K's block is 20480 bytes (5 layers x
# 16 positions x 32 K and 32 V floats), so 16777216 blocks (the top of the range) are 320 GiB
mem=$(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)
if [ "$mem" -lt $((320 * 1024 * 1024)) ]; then
    refused "--kv-blocks 16777216: 320 GiB of KV, more than the ${mem} kB of memory" 2 --kv-blocks 16777216 'GiB' -- --kv-blocks 16777216
else
    start_server bigpool --threads 1 --kv-blocks 16777216 && ok "--kv-blocks 16777216 fits in ${mem} kB and starts" || bad "--kv-blocks 16777216 starts"
    stop_servers
fi
if start_server top --threads 1 --max-batch 1024; then
    ok "--max-batch 1024 (the top of the engine's range) starts"
else
    bad "--max-batch 1024 starts"
fi
stop_servers
if start_server longctx --threads 1 --ctx 4096; then
    check "--ctx 4096 on a model trained for 2048 warns as run does, and serves" grep -q "warning: --ctx 4096 is more than the 2048 positions" "$tmp/longctx.log"
else
    bad "--ctx 4096 starts"
fi
stop_servers
"$CALDRIX" run "$S260" --ctx 4096 -p x -n 1 >/dev/null 2>"$tmp/run.err"
check "... as run's warning says it" grep -q "warning: --ctx 4096 is more than the 2048 positions" "$tmp/run.err"

# ---- --threads: one range, 1..4 x the cores this process may use (at most 1024), everywhere ----
cores=$(nproc)
top=$((4 * cores)); [ $top -gt 1024 ] && top=1024
over=$((top + 1))
same=0
for cmd in "run $S260 -n 1 -p x" "bench $S260 -n 1 -p 1" "serve $S260" "quantize $S260 $tmp/q.gguf Q8_0" "synth $tmp/s.gguf --shape tiny --type F32"; do
    # shellcheck disable=SC2086
    timeout 60 "$CALDRIX" $cmd --threads $over >/dev/null 2>"$tmp/t.err"
    rc=$?
    if [ $rc = 2 ] && grep -qF -- "--threads: \"$over\" is not an integer in [1, $top]" "$tmp/t.err" && ! grep -q listening "$tmp/t.err"; then
        same=$((same+1))
    else
        echo "  ${cmd%% *} --threads $over: exit $rc: $(cat "$tmp/t.err")"
    fi
done
check "--threads $over is refused with the same range [1, $top] by run, bench, serve, quantize and synth ($same of 5)" [ $same = 5 ]
helps=0
for cmd in run bench serve quantize synth; do
    "$CALDRIX" $cmd --help 2>&1 | grep -qF -- "--threads 1..$top" && helps=$((helps+1))
done
check "their --help prints the range from the same table ($helps of 5)" [ $helps = 5 ]
"$CALDRIX" serve --help >"$tmp/help.txt"
check "serve --help gives the engine's ranges (--max-batch 1..1024, --kv-blocks 1..16777216)" grep -qF -- "--max-batch 1..1024, --max-queue 1..1048576, --ctx 1..16777216, --kv-blocks 1..16777216" "$tmp/help.txt"

# ---- stop: a stream ends with an error event and [DONE], a whole answer is a 503, exit 0 ----
# a context of 16384 and 16000 tokens to make: minutes of work, cut by the signal after a second
for sig in INT TERM; do
    start_server "stop-$sig" --threads 1 --ctx 16384 || { bad "the server starts (SIG$sig)"; continue; }
    spid=$PID
    L='"prompt":"Once","max_tokens":16000,"ignore_eos":true'
    curl -s -N -m 60 -H 'Content-Type: application/json' -d "{$L,\"stream\":true}" "$URL/v1/completions" >"$tmp/stop-$sig.sse" 2>/dev/null &
    c1=$!
    curl -s -m 60 -o "$tmp/stop-$sig.json" -w '%{http_code}' -H 'Content-Type: application/json' -d "{$L}" "$URL/v1/completions" >"$tmp/stop-$sig.code" 2>/dev/null &
    c2=$!
    for _ in $(seq 100); do [ "$(grep -c '^data: ' "$tmp/stop-$sig.sse" 2>/dev/null)" -gt 5 ] && break; sleep 0.1; done
    sleep 0.5
    t0=$(date +%s%N)
    kill -$sig "$spid"
    for _ in $(seq 150); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    if kill -0 "$spid" 2>/dev/null; then rc=running; else wait "$spid"; rc=$?; fi
    wait $c1 $c2
    check "SIG$sig: the server exits 0 within 15 s (exit $rc after $ms ms)" [ "$rc" = 0 ]
    check "SIG$sig: it exits promptly (under 5 s: $ms ms)" [ "$ms" -lt 5000 ]
    sse "$tmp/stop-$sig.sse" >"$tmp/stop-$sig.ev" 2>/dev/null
    check "SIG$sig: the open stream had tokens, then ends with an error event and [DONE]" [ "$(jv "$tmp/stop-$sig.ev" "[len(d) > 5, all('choices' in c for c in d[:-2]), d[-2]['error']['code'], d[-2]['error']['type'], sorted(d[-2]['error'].keys()), d[-1]]")" = '[true, true, "server_shutting_down", "server_error", ["code", "message", "param", "type"], "[DONE]"]' ]
    check "SIG$sig: the request waiting for its whole answer got 503 with a JSON error" [ "$(cat "$tmp/stop-$sig.code")" = 503 -a "$(jv "$tmp/stop-$sig.json" "d['error']['code']")" = '"server_shutting_down"' ]
    SERVER_PIDS=()
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
