#!/usr/bin/env bash
# Sourced by the server's shell tests (not a test itself): starting and stopping `caldrix serve` on a
# free loopback port, and small JSON helpers. Every server started here is killed on exit.
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
tmp=$(mktemp -d)
SERVER_PIDS=()
stop_servers() {
    for p in "${SERVER_PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${SERVER_PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    SERVER_PIDS=()
}
trap 'stop_servers; rm -rf "$tmp"' EXIT

# start_server NAME [serve args...]: sets URL and PID (127.0.0.1 only, port chosen by the kernel);
# returns 1 when it did not become healthy within 60 s.
start_server() {
    local name=$1; shift
    "$CALDRIX" serve "$@" --host 127.0.0.1 --port 0 >"$tmp/$name.log" 2>&1 &
    PID=$!
    SERVER_PIDS+=("$PID")
    local port=""
    for _ in $(seq 600); do
        port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$tmp/$name.log" | head -1)
        [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$port/health")" = 200 ] && break
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
    done
    URL="http://127.0.0.1:$port"
    if [ "$(curl -s -o /dev/null -w '%{http_code}' -m 2 "$URL/health")" != 200 ]; then
        echo "server $name did not start:"; cat "$tmp/$name.log"; return 1
    fi
}

# post PATH BODY OUTFILE [curl args...]: prints the HTTP status
post() {
    local path=$1 body=$2 out=$3; shift 3
    curl -s -m 60 -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "$body" "$@" "$URL$path"
}

# jv FILE EXPR: a Python expression over d (FILE's JSON) printed as JSON
jv() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps($2))" "$1" 2>/dev/null; }

# sse FILE: the SSE stream's data lines as a JSON array (the [DONE] line as the string "[DONE]")
sse() {
    python3 - "$1" <<'PY'
import json, sys
out = []
for block in open(sys.argv[1], encoding='utf-8').read().split('\n\n'):
    if not block.strip():
        continue
    assert block.startswith('data: '), block
    x = block[6:]
    out.append(x if x == '[DONE]' else json.loads(x))
print(json.dumps(out))
PY
}
