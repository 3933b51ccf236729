#!/usr/bin/env bash
# caldrix serve under faults, bounded in count and time: 64 concurrent streaming clients, 16 that hang
# up mid-stream, 1,000 malformed requests, slow clients and
# more connections than allowed; the server never crashes, every request gets the right status,
# and afterwards no KV block is in use and it still answers as before.
# isa-neutral: status codes, hang-ups and freed KV blocks under faults; its before/after answers come from one kernel set
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
# the queue holds all 64 clients even when they all arrive before the engine thread takes one in
start_server faults --threads 1 --max-batch 8 --max-queue 128 || { bad "the server starts"; echo "$pass passed, $fail failed"; exit 1; }
B='"prompt":"Once upon a time","max_tokens":48,"temperature":0'
post /v1/completions "{$B}" "$tmp/before.json" >/dev/null

# 64 streaming clients at once (8 run, 56 wait), 16 more that hang up after 0.2 s
CL=()
for i in $(seq 64); do
    curl -s -N -m 120 -H 'Content-Type: application/json' -d "{$B,\"stream\":true,\"seed\":$i}" "$URL/v1/completions" >"$tmp/s$i.sse" 2>/dev/null &
    CL+=($!)
done
for i in $(seq 16); do
    curl -s -N -m 0.2 -H 'Content-Type: application/json' -d '{"prompt":"Once","max_tokens":1500,"ignore_eos":true,"stream":true}' "$URL/v1/completions" >/dev/null 2>&1 &
    CL+=($!)
done
wait "${CL[@]}"
done_ok=0
for i in $(seq 64); do tail -c 14 "$tmp/s$i.sse" | grep -q 'data: \[DONE\]' && done_ok=$((done_ok+1)); done
check "64 concurrent streams all end with [DONE] ($done_ok)" [ $done_ok = 64 ]
same=0
for i in $(seq 64); do [ "$(sse "$tmp/s$i.sse" | python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps(''.join(c['choices'][0]['text'] for c in d[:-1])))")" = "$(jv "$tmp/before.json" "d['choices'][0]['text']")" ] && same=$((same+1)); done
check "every greedy stream beside 63 others equals the lone request ($same of 64)" [ $same = 64 ]

# 1,000 malformed requests, each with its expected status
python3 - "$URL" >"$tmp/mal.txt" <<'PY'
import http.client, json, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
cases = []
bodies400 = [b'', b'{', b'[]', b'null', b'"x"', b'{"prompt":', b'\xff\xfe', b'{"prompt":"\xc3\x28"}',
             b'{"prompt":1e999}', b'{"prompt":"x","max_tokens":123456789012345678901234567890}',
             b'{"prompt":"x","temperature":1e308}', b'{"prompt":"x","top_k":-5}', b'{"prompt":[1,2,-7]}',
             b'{"prompt":[1,2,3.5]}', b'{"prompt":"x","stop":[1]}', b'{"prompt":"x","n":0}',
             b'{"prompt":"x","seed":"s"}', b'{"prompt":"x","logprobs":99}', b'{"prompt":{}}', b'{"prompt":"x","stream":"yes"}']
chat400 = [b'{"messages":"hi"}', b'{"messages":[{"role":1,"content":"x"}]}', b'{"messages":[]}',
           b'{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"file:///etc/passwd"}}]}]}',
           b'{"messages":[{"role":"user","content":"x"}],"top_logprobs":5}']
bodies400 += [b'[' * 100000, b'{"prompt":"x","max_tokens":-4}', b'{"prompt":"\\ud800"}', b'{"prompt":"x","prompt":5}',
              b'{"prompt":NaN}', b'{"prompt":"x","top_p":2}', b'{"prompt":"x","min_p":-1}', b'{"prompt":"x","presence_penalty":5}',
              b'{"prompt":"x","repetition_penalty":0}', b'{"prompt":"x","stream_options":{"include_usage":"y"}}',
              b'{"prompt":"x","echo":true}', b'{"prompt":["a","b"]}', b'{"prompt":[]}', b'{"prompt":"\xe0\x80\xaf"}',
              b'{"prompt":"x","max_tokens":1.5}', b'{"prompt":"x","stop":"' + b'y' * 70000 + b'"}']
chat400 += [b'{"messages":[{"role":"user"}]}',
            b'{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}',
            b'{"messages":[{"role":"user","content":[{"type":"text"}]}]}',
            b'{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://example.com/a.png"}}]}]}',
            b'{"messages":[{"role":"user","content":"x"}],"tools":{}}']
for i in range(1000):
    k = i % 10
    if k < 4: cases.append(('POST', '/v1/completions', bodies400[i % len(bodies400)], 400))
    elif k < 6: cases.append(('POST', '/v1/chat/completions', chat400[i % len(chat400)], 400))
    elif k == 6: cases.append(('GET', '/v1/completions', None, 405))
    elif k == 7: cases.append(('DELETE', '/v1/models', None, 405))
    elif k == 8: cases.append(('POST', '/../../etc/passwd' if i % 20 == 8 else '/v2/x%00', b'{}', 404))
    else: cases.append(('POST', '/tokenize', b'{"content":5}', 400))
bad = 0
for m, p, b, want in cases:
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=20)
    try:
        c.request(m, p, body=b, headers={'Content-Type': 'application/json'})
        r = c.getresponse(); body = r.read()
        ok = r.status == want and 'error' in json.loads(body)
    except Exception as e:
        ok = False; body = str(e).encode()
    if not ok:
        bad += 1
        print('bad', m, p, b[:60] if b else b, r.status if 'r' in dir() else '?', body[:200])
    c.close()
print('malformed', len(cases), 'bad', bad)
PY
check "1,000 malformed requests each get their 4xx with an OpenAI error body" grep -q "^malformed 1000 bad 0$" "$tmp/mal.txt" || head -5 "$tmp/mal.txt"
check "the server is still alive" kill -0 "$PID"

# afterwards: nothing running, no block in use, the same answer
used=""
for _ in $(seq 50); do
    curl -s -m 5 "$URL/metrics" >"$tmp/metrics.txt"
    used=$(sed -n 's/^caldrix_kv_blocks{state="used"} //p' "$tmp/metrics.txt")
    act=$(sed -n 's/^caldrix_active_sequences //p' "$tmp/metrics.txt")
    [ "$used" = 0 ] && [ "$act" = 0 ] && break
    sleep 0.1
done
check "/metrics: no KV block in use and no sequence active afterwards (used=$used)" [ "$used" = 0 -a "$act" = 0 ]
check "/metrics counts the requests by route and status" grep -q '^caldrix_requests_total{route="/v1/completions",status="400"} ' "$tmp/metrics.txt"
check "/metrics has the latency histograms and the cancelled clients" [ "$(grep -c '^caldrix_time_to_first_token_seconds_bucket\|^caldrix_time_per_output_token_seconds_bucket' "$tmp/metrics.txt")" -gt 20 -a "$(sed -n 's/^caldrix_generations_total{reason="cancelled"} //p' "$tmp/metrics.txt")" -ge 1 ]
post /v1/completions "{$B}" "$tmp/after.json" >/dev/null
check "the server answers as before" [ "$(jv "$tmp/after.json" "d['choices'][0]['text']")" = "$(jv "$tmp/before.json" "d['choices'][0]['text']")" ]
stop_servers

# slow clients and too many connections, on a server with a 2 s idle timeout and 16 connections:
# clients that stall in their headers or body are dropped, extra connections are refused, and the
# server keeps answering meanwhile and afterwards
start_server slow --threads 1 --timeout 2 --max-connections 16 || { bad "the slow-client server starts"; echo "$pass passed, $fail failed"; exit 1; }
python3 - "$URL" >"$tmp/slow.txt" <<'PY'
import http.client, json, socket, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
def ask():
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request('POST', '/v1/completions', body=b'{"prompt":"Once","max_tokens":4,"temperature":0}', headers={'Content-Type': 'application/json'})
    r = c.getresponse(); ok = r.status == 200 and 'choices' in json.loads(r.read()); c.close(); return ok
def closed_within(s, limit):
    s.settimeout(limit)
    t0 = time.time()
    try:
        while s.recv(4096):
            pass
        return time.time() - t0 < limit
    except (socket.timeout, ConnectionResetError) as e:
        return isinstance(e, ConnectionResetError)
slow = []
for i in range(6):   # stalled in the headers
    s = socket.create_connection((u.hostname, u.port)); s.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Ty'); slow.append(s)
for i in range(4):   # stalled in the body
    s = socket.create_connection((u.hostname, u.port))
    s.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"prompt":'); slow.append(s)
print('served beside stalled clients', ask())
print('stalled clients dropped', all(closed_within(s, 10) for s in slow))
many = []
for i in range(48):  # three times the limit, all idle
    try:
        many.append(socket.create_connection((u.hostname, u.port), timeout=5))
    except OSError:
        pass
time.sleep(0.5)
dropped = 0
for s in many:
    s.settimeout(0.2)
    try:
        if s.recv(1) == b'':
            dropped += 1
    except socket.timeout:
        pass
    except ConnectionResetError:
        dropped += 1
print('extra connections refused', dropped >= 48 - 16)
for s in many + slow:
    s.close()
time.sleep(0.5)
print('served afterwards', ask())
PY
for what in "served beside stalled clients" "stalled clients dropped" "extra connections refused" "served afterwards"; do
    check "slow clients: $what" grep -q "^$what True$" "$tmp/slow.txt"
done
check "slow clients: the server is still alive" kill -0 "$PID"
stop_servers
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
