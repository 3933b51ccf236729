#!/usr/bin/env bash
# caldrix serve at the HTTP level, on 127.0.0.1 only: CORS (--cors: the headers on every answer,
# OPTIONS preflights without a key), the request log (--log-requests: one line per request on
# stderr), and malformed HTTP sent over raw sockets (one answer each, in the JSON error shape).
# isa-neutral: HTTP framing and routes
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

# ---- malformed HTTP over raw sockets: one answer each, the JSON error shape, the right status ----
start_server raw --threads 1 || bad "the server starts for raw requests"
python3 - "$URL" >"$tmp/raw.txt" <<'PY'
import json, re, socket, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
def ask(parts, pause=0.0):
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    for i, p in enumerate(parts):
        if i:
            time.sleep(pause)
        try:
            s.sendall(p)
        except (BrokenPipeError, ConnectionResetError):
            break  # the server answered before the body's end (a refusal): read what it said
    out = b''
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except (socket.timeout, ConnectionResetError) as e:
        out += b'<<' + type(e).__name__.encode() + b'>>'
    s.close()
    return out
def one_json_answer(raw, status):
    """exactly one response: a status line, headers, a body of Content-Length bytes that is the error JSON, nothing after"""
    if b'<html' in raw.lower():
        return 'html: %r' % raw[:300]
    head, _, rest = raw.partition(b'\r\n\r\n')
    lines = head.decode('latin1').split('\r\n')
    if not lines[0].startswith('HTTP/1.1 %d ' % status):
        return 'status line %r, want %d' % (lines[0], status)
    h = {l.split(':', 1)[0].lower(): l.split(':', 1)[1].strip() for l in lines[1:]}
    n = int(h.get('content-length', -1))
    body, after = rest[:n], rest[n:]
    if not h.get('content-type', '').startswith('application/json') or n < 0 or len(body) != n:
        return 'headers %r body %d bytes' % (h, len(rest))
    if after:
        return 'more after the answer: %r' % after[:300]
    e = json.loads(body).get('error', {})
    if sorted(e) != ['code', 'message', 'param', 'type'] or 'JSON_' in e['message'] or '<' in e['message']:
        return 'body %r' % body
    return 'ok'
cases = [
    ('Content-Length: -5', [b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}'], 400),
    ('a 20-digit Content-Length', [b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n{}'], 413),
    ('Content-Length: abc', [b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}'], 400),
    ('two different Content-Lengths', [b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}'], 400),
    ('Content-Length and chunked', [b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}'], 400),
    ('Transfer-Encoding: gzip', [b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n{}'], 501),
    ('a request line that is not one', [b'GARBAGE\r\n\r\n'], 400),
    ('HTTP/2.0 in the request line', [b'GET /health HTTP/2.0\r\nHost: x\r\n\r\n'], 505),
    ('a header line without a colon', [b'GET /health HTTP/1.1\r\nHost x\r\n\r\n'], 400),
    ('a 20 KiB header', [b'GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ' + b'a' * 20000 + b'\r\n\r\n'], 431),
]
CH = b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n'
cases += [('a chunk size that is not hex', [CH + b'zz\r\n{}\r\n0\r\n\r\n'], 400),
          ('chunk data longer than its size', [CH + b'2\r\n{}}\r\n0\r\n\r\n'], 400)]
def post_to(path, body):
    return [b'POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n' % (path, len(body)) + body]
def post(body):
    return post_to(b'/v1/chat/completions', body)
cases += [('a NUL in a JSON string', post(b'{"messages":[{"role":"user","content":"a\\u0000"}]}'), 400),
          ('an unknown role', post(b'{"messages":[{"role":"wizard","content":"a"}]}'), 400)]
for name, parts, status in cases:
    print('%s|%s' % (name, one_json_answer(ask(parts), status)))
# a head that arrives in pieces still passes; a second request behind the first gets no second answer
body = b'{"prompt":"Once","max_tokens":2}'
r = ask([CH + b'%x\r\n' % 10 + body[:10] + b'\r\n', b'%x\r\n' % (len(body) - 10) + body[10:] + b'\r\n', b'0\r\n\r\n'], 0.05)
print('a good chunked body in three pieces|%s' % ('ok' if r.startswith(b'HTTP/1.1 200 ') and b'"choices"' in r else repr(r[:300])))
# chunked bodies the gate cannot see whole by peeking (they pause, or pass 1 MiB): read whole and
# checked by the gate (issue 35 item 8: libmicrohttpd answered these in HTML)
def chunked(b, size):
    return [b'%x\r\n' % len(b[i:i + size]) + b[i:i + size] + b'\r\n' for i in range(0, len(b), size)]
late = [('a bad chunk size after a 150 ms pause', [CH + b'2\r\n{}\r\n', b'zz\r\n{}\r\n0\r\n\r\n'], 400),
        ('chunk data longer than its size after a pause', [CH + b'2\r\n{}\r\n', b'2\r\n{}}\r\n0\r\n\r\n'], 400),
        ('a bad chunk size past 1 MiB', [CH + b''.join(chunked(b'{"prompt":"x","user":"' + b'a' * (3 << 19) + b'"}', 65536)), b'zz\r\n0\r\n\r\n'], 400),
        ('a chunk size over --max-body after a pause', [CH + b'2\r\n{}\r\n', b'%x\r\n' % (9 << 20)], 413),
        ('9 MiB of chunks after a pause', [CH + b'2\r\n{}\r\n', b''.join(chunked(b'a' * (9 << 20), 1 << 20)) + b'0\r\n\r\n'], 413)]
for name, parts, status in late:
    print('%s|%s' % (name, one_json_answer(ask(parts, 0.15), status)))
# ... and the good ones are read correctly: a 2 MiB body in 64 KiB chunks with pauses answers as the
# same body sent with a Content-Length; so does one behind "Expect: 100-continue"
small = b'{"prompt":"Once upon a time","max_tokens":6,"temperature":0'
big = small + b',"user":"' + b'u' * (2 << 20) + b'"}'
want = ask(post_to(b'/v1/completions', small + b'}'))
def choice_text(r):
    try:
        return json.loads(r.partition(b'\r\n\r\n')[2])['choices'][0]['text']
    except Exception:
        return repr(r[:200])
cs = chunked(big, 65536)
r = ask([CH + b''.join(cs[:8]), b''.join(cs[8:20]), b''.join(cs[20:]) + b'0\r\n\r\n'], 0.15)
print('a 2 MiB chunked body with pauses is read whole|%s' % ('ok' if r.startswith(b'HTTP/1.1 200 ') and choice_text(r) == choice_text(want) and len(choice_text(want)) > 0 else repr(r[:300])))
EX = CH.replace(b'\r\n\r\n', b'\r\nExpect: 100-continue\r\n\r\n')
r = ask([EX, b''.join(chunked(small + b'}', 7)) + b'0\r\n\r\n'], 0.15)
print('Expect: 100-continue on a chunked body|%s' % ('ok' if r.startswith(b'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 ') and choice_text(r.split(b'\r\n\r\n', 1)[1]) == choice_text(want) else repr(r[:300])))
r = ask([b'GET /hea', b'lth HTTP/1.1\r\nHo', b'st: x\r\n\r\n'], 0.2)
print('a head in three pieces|%s' % ('ok' if r.startswith(b'HTTP/1.1 200 ') and r.count(b'HTTP/1.') == 1 else repr(r[:200])))
r = ask([b'GET /health HTTP/1.1\r\nHost: x\r\n\r\nPOST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n'])
print('a request behind another on the connection|%s' % ('ok' if r.startswith(b'HTTP/1.1 200 ') and r.count(b'HTTP/1.') == 1 and b'connection: close' in r.lower() and r.count(b'HTTP/1.1 ') == 1 else repr(r[:400])))
PY
while IFS= read -r line; do
    check "raw HTTP, ${line%%|*}: one JSON answer" [ "${line#*|}" = ok ]; [ "${line#*|}" = ok ] || echo "   $line"
done <"$tmp/raw.txt"
check "raw HTTP: every case ran (24)" [ "$(wc -l <"$tmp/raw.txt")" = 24 ]
check "raw HTTP: the server is still alive and answers" [ "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$URL/health")" = 200 ]
curl -s -m 5 "$URL/metrics" >"$tmp/raw_metrics.txt"
check "raw HTTP: the refusals are counted in /metrics (route other, 400)" grep -q '^caldrix_requests_total{route="other",status="400"} [1-9]' "$tmp/raw_metrics.txt"
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

