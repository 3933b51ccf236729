#!/usr/bin/env bash
# serial: a browser and a server on both cores, with the page's timings in its checks
# The chat page of `caldrix serve` (GET /, ui/chat.html built into the binary), in a real browser:
# Debian's Chromium, headless, driven by playwright-core (pinned in tests/ui/package.json, installed
# from the npm registry into tests/ui/node_modules; no registry: the test fails; it downloads no
# browser). Against `caldrix serve` on the bundled stories260K: the page loads with no request to any
# other host and no console error, every control labelled; a message at temperature 0 streams the
# reply /v1/chat/completions gives for the same conversation (asked here with curl); regenerate,
# edit-and-resend, the system prompt, local storage; model output holding <script> and <img onerror>
# is shown as text; a 400, a 429 and a dropped stream are shown with a Retry that works; Stop (and
# Escape) end the stream and /metrics shows the request cancelled and no KV block held; with
# --api-key the page asks for the key; a phone-sized screen fits. Without the page (--no-ui) / is a
# JSON 404; the page's Content-Security-Policy holds the SHA-256 of its script and style, computed
# here by Python. Where Chromium is missing and cannot be installed, the test says so and counts
# itself as skipped, never as passed. A screenshot of a finished exchange is left in
# $BUILD/tests/ui/chat_page.png (not committed).
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
BUILD=${BUILD:-build}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}

# The four servers start at once (serve_lib.sh's start_server waits for each in turn):
# launch NAME ARGS... starts one; ready NAME sets URL once it answers /health (60 s at most).
launch() {
    local name=$1; shift
    "$CALDRIX" serve "$@" --host 127.0.0.1 --port 0 >"$tmp/$name.log" 2>&1 &
    SERVER_PIDS+=("$!")
}
ready() {
    local port=""
    for _ in $(seq 600); do
        port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$tmp/$1.log" | head -1)
        [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$port/health")" = 200 ] && break
        sleep 0.1
    done
    URL="http://127.0.0.1:$port"
    [ -n "$port" ] || { echo "server $1 did not start:"; cat "$tmp/$1.log"; return 1; }
}
launch page --threads 1
launch noui --threads 1 --no-ui
launch key --threads 1 --api-key s3cret-key
# the Stop server: a context long enough that a reply runs for seconds (--ctx past the trained 2048 warns)
launch slow --threads 1 --ctx 32768 --max-batch 1
# several models: one that loads on first use, one refused (not a GGUF file)
printf 'not a model' >"$tmp/junk.gguf"
launch multi --threads 1 --model ../shared/models/stories260K/stories260K.gguf=alpha --model "$tmp/junk.gguf=broken"

# ---- the page without a browser: the route, its headers, --no-ui ----
ready page || { echo "chat_page: $pass passed, 1 failed"; exit 1; }
PAGE_URL=$URL
code=$(curl -s -D "$tmp/head.txt" -o "$tmp/page.html" -w '%{http_code}' "$URL/")
grep -qi '^content-type: text/html; charset=utf-8' "$tmp/head.txt" && html=1 || html=0
check "GET / answers the page built into the binary (200, text/html)" [ "$code" = 200 -a $html = 1 ]
check "... byte for byte ui/chat.html" cmp -s "$tmp/page.html" ui/chat.html
python3 - "$tmp/head.txt" ui/chat.html >"$tmp/csp.txt" <<'PY'
import base64, hashlib, re, sys
head = open(sys.argv[1], encoding='latin-1').read()
csp = re.search(r'^content-security-policy: (.*?)\r?$', head, re.I | re.M).group(1)
page = open(sys.argv[2], encoding='utf-8').read()
h = lambda s: "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
want = ["default-src 'none'", "connect-src 'self'", "base-uri 'none'", "frame-ancestors 'none'",
        "script-src " + " ".join(h(s) for s in re.findall(r'<script>(.*?)</script>', page, re.S)),
        "style-src " + " ".join(h(s) for s in re.findall(r'<style>(.*?)</style>', page, re.S))]
missing = [w for w in want if w not in [d.strip() for d in csp.split(';')]]
print('csp ok' if not missing and 'unsafe' not in csp else 'csp bad: missing %r in %r' % (missing, csp))
PY
check "its Content-Security-Policy allows the page's script and style by their SHA-256 and nothing else" grep -q '^csp ok$' "$tmp/csp.txt" || cat "$tmp/csp.txt"
check "... and says nosniff and no-referrer" grep -qi '^x-content-type-options: nosniff' "$tmp/head.txt"
check "HEAD / answers 200" [ "$(curl -s -I -o /dev/null -w '%{http_code}' "$URL/")" = 200 ]
check "POST / is a 405" [ "$(curl -s -o /dev/null -w '%{http_code}' -d '{}' "$URL/")" = 405 ]
check "caldrix serve says where the chat page is" grep -q "chat page: http://127.0.0.1:.*/$" "$tmp/page.log"
check "serve --help lists the page among the routes" sh -c "'$CALDRIX' serve --help | grep -Eq '^  GET +/ +the chat page'"
MODEL=$(curl -s "$URL/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
# the reference: /v1/chat/completions' greedy reply, not streamed, for what the page will send
PROMPT="Once upon a time"
MAXTOK=48
post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}],\"temperature\":0,\"top_p\":1,\"max_tokens\":$MAXTOK}" "$tmp/ref.json" >/dev/null
REF=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({"text": d["choices"][0]["message"]["content"], "prompt_tokens": d["usage"]["prompt_tokens"]}))' "$tmp/ref.json")
check "the reference reply is not empty" python3 -c 'import json,sys; assert json.loads(sys.argv[1])["text"]' "$REF"

ready noui || bad "serve --no-ui starts"
code=$(curl -s -o "$tmp/noui.json" -w '%{http_code}' "$URL/")
grep -q '"not_found"' "$tmp/noui.json" && nf=1 || nf=0
check "with --no-ui, / is a JSON 404" [ "$code" = 404 -a $nf = 1 ]
ready key || bad "serve --api-key starts"
KEY_URL=$URL
check "with --api-key the page needs no key" [ "$(curl -s -o /dev/null -w '%{http_code}' "$KEY_URL/")" = 200 ]
check "... but the API still does" [ "$(curl -s -o /dev/null -w '%{http_code}' "$KEY_URL/v1/models")" = 401 ]
ready slow || bad "the Stop server starts"
SLOW_URL=$URL
ready multi || bad "the several-models server starts"
MULTI_URL=$URL

echo "# servers up after ${SECONDS} s"
# ---- the browser ----
if [ ! -x "$CHROMIUM" ]; then
    echo "# $CHROMIUM is missing: installing the chromium package (scripts/deps chromium)"
    timeout 600 scripts/deps chromium >"$tmp/apt.log" 2>&1 || tail -5 "$tmp/apt.log"
fi
if [ ! -x "$CHROMIUM" ]; then
    echo "# SKIPPED: no Chromium at $CHROMIUM and it could not be installed: the page was not tested in a browser"
    echo "chat_page: $pass passed, $fail failed, 1 skipped"
    [ "$fail" -eq 0 ]; exit
fi
pinned() { python3 -c 'import json; assert json.load(open("node_modules/playwright-core/package.json"))["version"] == json.load(open("package.json"))["dependencies"]["playwright-core"]' 2>/dev/null; }
if (cd tests/ui && { pinned || timeout 300 npm install --no-audit --no-fund --no-package-lock >"$tmp/npm.log" 2>&1; }); then
    mkdir -p "$BUILD/tests/ui"
    SHOT="$PWD/$BUILD/tests/ui/chat_page.png"
    rm -f "$SHOT"
    cfg=$(python3 -c 'import json,sys; a=sys.argv; print(json.dumps({"url": a[1], "slow_url": a[2], "multi_url": a[10], "image": a[11], "key_url": a[3], "key": "s3cret-key", "model": a[4],
        "ref": json.loads(a[5]), "prompt": a[6], "max_tokens": int(a[7]), "slow_max_tokens": 30000, "shot": a[8], "chromium": a[9]}))' \
        "$PAGE_URL" "$SLOW_URL" "$KEY_URL" "$MODEL" "$REF" "$PROMPT" "$MAXTOK" "$SHOT" "$CHROMIUM" "$MULTI_URL" "$PWD/../shared/fixtures/hf/idefics3/img_a_64x64.png")
    (cd tests/ui && timeout 120 node chat_page.mjs "$cfg") >"$tmp/browser.txt" 2>&1
    rc=$?
    cat "$tmp/browser.txt"
    pass=$((pass + $(grep -c '^ok - ' "$tmp/browser.txt")))
    fail=$((fail + $(grep -c '^not ok - ' "$tmp/browser.txt")))
    check "the browser script ran to its end (exit $rc)" grep -q '^browser: [0-9]* failed$' "$tmp/browser.txt"
    check "the screenshot is a PNG" sh -c "head -c 8 '$SHOT' | od -An -c | grep -q 'P   N   G'"
else
    bad "npm installs the pinned playwright-core (registry unreachable?)"; cat "$tmp/npm.log"
fi
stop_servers
echo "chat_page: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
