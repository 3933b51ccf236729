#!/usr/bin/env bash
# caldrix serve with a vision model (../shared/fixtures/hf/idefics3, no tokenizer: /v1/completions with
# prompt ids and caldrix's "images" list of image_url parts, the same shape chat uses): every case of
# the fixture gives the PyTorch golden's 16 tokens, as `caldrix run` does; a repeated image reuses the
# cache; URLs that are not data: URLs, bad base64 and bad images are refused 400 naming the field.
cd "$(dirname "$0")/../.."
. tests/server/serve_lib.sh
F=../shared/fixtures/hf/idefics3

start_server vlm "$F" --threads 2 || { echo "$pass passed, $((fail+1)) failed"; exit 1; }
n=$(python3 -c "import json; print(len(json.load(open('$F/golden.json'))['cases']))")
for i in $(seq 0 $((n - 1))); do
    python3 - "$F" "$i" > "$tmp/body.json" <<'PY'
import base64, json, sys
F, i = sys.argv[1], int(sys.argv[2])
c = json.load(open(F + '/golden.json'))['cases'][i]
b = {"prompt": c['prompt_ids'], "max_tokens": 16, "temperature": 0, "ignore_eos": True, "return_tokens": True}
if c['images']:
    b["images"] = [{"type": "image_url", "image_url": {"url": "data:image/png;base64," +
                    base64.b64encode(open(F + '/' + f, 'rb').read()).decode()}} for f in c['images']]
if c['processor_kwargs']:
    b["image_opts"] = c['processor_kwargs']
print(json.dumps(b))
PY
    name=$(python3 -c "import json; print(json.load(open('$F/golden.json'))['cases'][$i]['name'])")
    want=$(python3 -c "import json; print(json.dumps(json.load(open('$F/golden.json'))['cases'][$i]['tokens']))")
    code=$(post /v1/completions "@$tmp/body.json" "$tmp/out.json")
    got=$(jv "$tmp/out.json" "d['choices'][0]['tokens']")
    [ "$code" = 200 ] && [ "$got" = "$want" ] && ok "$name through the server: the golden's 16 tokens" \
        || { bad "$name through the server (HTTP $code)"; cat "$tmp/out.json"; echo; }
done
# the split image again: its blocks come from the cache
code=$(post /v1/completions "@$tmp/body.json" "$tmp/out2.json")
python3 - "$F" > "$tmp/body.json" <<'PY'
import base64, json, sys
F = sys.argv[1]
c = json.load(open(F + '/golden.json'))['cases'][1]
print(json.dumps({"prompt": c['prompt_ids'], "max_tokens": 16, "temperature": 0, "ignore_eos": True, "return_tokens": True,
  "images": [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(open(F + '/img_b_128x128.png', 'rb').read()).decode()}}]}))
PY
code=$(post /v1/completions "@$tmp/body.json" "$tmp/out.json")
cached=$(jv "$tmp/out.json" "d['usage'].get('prompt_tokens_details', {}).get('cached_tokens')")
[ "$code" = 200 ] && [ "$cached" = 32 ] && ok "the same image again: 32 prompt tokens from the cache" || { bad "cache (HTTP $code, cached $cached)"; cat "$tmp/out.json"; echo; }

# refusals: 400 with the field named
img=$(base64 -w0 "$F/img_a_64x64.png")
cut=$(head -c 300 "$F/img_a_64x64.png" | base64 -w0)
refuse() { # NAME BODY PARAM MESSAGE [PATH]
    local code; code=$(post "${5:-/v1/completions}" "$2" "$tmp/err.json")
    local param msg; param=$(jv "$tmp/err.json" "d['error']['param']"); msg=$(jv "$tmp/err.json" "d['error']['message']")
    if [ "$code" = 400 ] && [ "$param" = "\"$3\"" ] && [[ "$msg" == *"$4"* ]]; then ok "$1"; else bad "$1 (HTTP $code, param $param, $msg)"; fi
}
refuse "an http URL is refused, never fetched" \
    '{"prompt":[1,2],"images":[{"type":"image_url","image_url":{"url":"http://example.com/cat.png"}}]}' \
    "images[0].image_url.url" "fetches no URL"
refuse "a file URL is refused" '{"prompt":[1,2],"images":[{"type":"image_url","image_url":{"url":"file:///etc/passwd"}}]}' \
    "images[0].image_url.url" "data: URL"
refuse "bad base64 is refused" '{"prompt":[1,2],"images":[{"type":"image_url","image_url":{"url":"data:image/png;base64,@@@@"}}]}' \
    "images[0].image_url.url" "not valid base64"
refuse "a truncated PNG is refused" "{\"prompt\":[1,2],\"images\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,$cut\"}}]}" \
    "images[0].image_url.url" "truncated"
refuse "image tokens that do not match the images are refused" \
    "{\"prompt\":[1,2],\"images\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,$img\"}}]}" \
    "prompt" "0 image tokens"
refuse "a bad image_opts value is refused" \
    "{\"prompt\":[1,2],\"image_opts\":{\"resample\":3},\"images\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,$img\"}}]}" \
    "image_opts.resample" "LANCZOS"
refuse "a chat image part without a tokenizer is refused" \
    '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]}' \
    "messages[0].content[0].image_url.url" "fetches no URL" /v1/chat/completions
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$URL/health")
[ "$code" = 200 ] && ok "the server still answers" || bad "health after the refusals: $code"
stop_servers
# a text model refuses image parts
start_server text ../shared/fixtures/hf/llama --threads 2 || { echo "$pass passed, $((fail+1)) failed"; exit 1; }
refuse "a text model refuses images" "{\"prompt\":[1,2],\"images\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,$img\"}}]}" \
    "images[0]" "takes no images"
stop_servers
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
