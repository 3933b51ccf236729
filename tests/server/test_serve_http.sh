#!/usr/bin/env bash
# caldrix serve at the HTTP level, on 127.0.0.1 only: CORS (--cors: the headers on every answer,
# OPTIONS preflights without a key), the request log (--log-requests: one line per request on
# stderr), and malformed HTTP sent over raw sockets (one answer each, in the JSON error shape).
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh

# hdrs METHOD PATH OUT [curl args...]: the status and headers (lower-case names) into OUT, prints the status
hdrs() {
    local m=$1 path=$2 out=$3; shift 3
    curl -s -m 30 -X "$m" -D "$out.raw" -o "$out.body" -w '%{http_code}' "$@" "$URL$path"
    tr -d '\r' <"$out.raw" | sed 's/^\([^:]*\):/\L\1:/' >"$out"
}
has() { grep -qix "$2" "$1"; } # has FILE 'name: value' (whole line, any case)

# ---- CORS off by default: no headers, OPTIONS is not a method the routes take ----
start_server plain --threads 1 || { bad "the server starts"; echo "$pass passed, $fail failed"; exit 1; }
code=$(hdrs POST /v1/completions "$tmp/p" -H 'Origin: http://a.example' -d '{"prompt":"Once","max_tokens":2}')
{ [ "$code" = 200 ] && ! grep -qi '^access-control' "$tmp/p"; } && y=1 || y=0
check "without --cors: no Access-Control-Allow-Origin" [ $y = 1 ]
code=$(hdrs OPTIONS /v1/completions "$tmp/o" -H 'Origin: http://a.example' -H 'Access-Control-Request-Method: POST')
{ [ "$code" = 405 ] && ! grep -qi '^access-control' "$tmp/o"; } && y=1 || y=0
check "without --cors: OPTIONS is a 405" [ $y = 1 ]
stop_servers

# ---- --cors ORIGIN with an API key ----
start_server cors --threads 1 --cors http://a.example --api-key k3y --log-requests || { bad "serve --cors starts"; echo "$pass passed, $fail failed"; exit 1; }
code=$(hdrs OPTIONS /v1/chat/completions "$tmp/pf" -H 'Origin: http://a.example' -H 'Access-Control-Request-Method: POST' \
    -H 'Access-Control-Request-Headers: authorization, content-type, x-stainless-os')
{ [ "$code" = 204 ] && has "$tmp/pf" 'access-control-allow-origin: http://a.example' && has "$tmp/pf" 'access-control-allow-methods: POST, OPTIONS' && has "$tmp/pf" 'access-control-allow-headers: authorization, content-type, x-stainless-os' && grep -qi '^access-control-max-age: ' "$tmp/pf"; } && y=1 || y=0
check "a preflight (no Authorization) is 204 with the origin, methods and the asked headers" [ $y = 1 ]
code=$(hdrs OPTIONS /v1/models "$tmp/pf2" -H 'Origin: http://a.example' -H 'Access-Control-Request-Method: GET')
{ [ "$code" = 204 ] && has "$tmp/pf2" 'access-control-allow-methods: GET, HEAD, OPTIONS' && has "$tmp/pf2" 'access-control-allow-headers: Authorization, Content-Type'; } && y=1 || y=0
check "a preflight of a GET route allows GET, and Authorization by default" [ $y = 1 ]
code=$(hdrs POST /v1/chat/completions "$tmp/c" -H 'Origin: http://a.example' -H 'Authorization: Bearer k3y' \
    -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3}')
{ [ "$code" = 200 ] && has "$tmp/c" 'access-control-allow-origin: http://a.example' && has "$tmp/c" 'vary: Origin'; } && y=1 || y=0
check "an answer carries Access-Control-Allow-Origin and Vary: Origin" [ $y = 1 ]
code=$(hdrs POST /v1/chat/completions "$tmp/cs" -H 'Origin: http://a.example' -H 'Authorization: Bearer k3y' \
    -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"stream":true}')
{ [ "$code" = 200 ] && has "$tmp/cs" 'access-control-allow-origin: http://a.example' && tail -c 14 "$tmp/cs.body" | grep -q '\[DONE\]'; } && y=1 || y=0
check "... a stream too" [ $y = 1 ]
code=$(hdrs POST /v1/completions "$tmp/u" -H 'Origin: http://a.example' -d '{"prompt":"x"}')
{ [ "$code" = 401 ] && has "$tmp/u" 'access-control-allow-origin: http://a.example'; } && y=1 || y=0
check "... a 401 too (the page can read why)" [ $y = 1 ]
code=$(hdrs OPTIONS /v1/nothing "$tmp/pn" -H 'Origin: http://a.example')
check "a preflight of an unknown route is not a 204 (401: the key comes before the route)" [ "$code" = 401 ]
code=$(hdrs GET /v1/models "$tmp/m" -H 'Authorization: Bearer k3y')
code2=$(hdrs GET /nope "$tmp/n" -H 'Authorization: Bearer k3y')
stop_servers

# ---- the request log of that server: one line per request, in order, with the usage ----
python3 - "$tmp/cors.log" "$tmp/c.body" >"$tmp/log.txt" <<'PY'
import json, re, sys
# start_server's own /health polls are logged too: left out here
lines = [l.rstrip('\n') for l in open(sys.argv[1]) if re.match(r'^\d{4}-\d\d-\d\dT', l) and ' GET /health ' not in l]
pat = re.compile(r'^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (\S+) (\S+) (\S+) (\d{3}) (-|prompt=(\d+) completion=(\d+)) (\d+\.\d)ms$')
want = [('OPTIONS', '/v1/chat/completions', '-', '204'), ('OPTIONS', '/v1/models', '-', '204'),
        ('POST', '/v1/chat/completions', 'stories260K', '200'), ('POST', '/v1/chat/completions', 'stories260K', '200'),
        ('POST', '/v1/completions', '-', '401'), ('OPTIONS', '/v1/nothing', '-', '401'),
        ('GET', '/v1/models', '-', '200'), ('GET', '/nope', '-', '404')]
got = []
for l in lines:
    m = pat.match(l)
    if not m:
        print('unparsed', repr(l)); continue
    got.append((m.group(2), m.group(3), m.group(4), m.group(5)))
print('shapes', got == want, len(lines))
if got != want:
    print('got', got); print('want', want)
u = json.load(open(sys.argv[2]))['usage']
m = pat.match(lines[2]) if len(lines) > 2 else None
print('usage', bool(m) and (int(m.group(7)), int(m.group(8))) == (u['prompt_tokens'], u['completion_tokens']))
PY
check "--log-requests: one line per request (time, method, route, model, status, tokens, ms), in order" grep -qx 'shapes True 8' "$tmp/log.txt" || cat "$tmp/log.txt"
check "--log-requests: the tokens are the answer's usage" grep -qx 'usage True' "$tmp/log.txt"
check "without --log-requests: no request lines" [ "$(grep -c '^[0-9]\{4\}-' "$tmp/plain.log")" = 0 ]

# ---- --cors '*' ----
start_server star --threads 1 --cors '*' || bad "serve --cors '*' starts"
code=$(hdrs GET /v1/models "$tmp/s" -H 'Origin: http://b.example')
{ [ "$code" = 200 ] && has "$tmp/s" 'access-control-allow-origin: \*' && ! grep -qi '^vary:' "$tmp/s"; } && y=1 || y=0
check "--cors '*': Access-Control-Allow-Origin: *, no Vary" [ $y = 1 ]
stop_servers
"$CALDRIX" serve --port 0 --cors $'http://a\r\nX-Evil: 1' >"$tmp/bad.log" 2>&1
{ [ $? -ne 0 ] && grep -q 'CORS origin' "$tmp/bad.log" && ! grep -q listening "$tmp/bad.log"; } && y=1 || y=0
check "--cors with a control character is refused before listening" [ $y = 1 ]

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

