#!/usr/bin/env bash
# serve with Qwen2-VL's text path (the tiny checkpoint scripts/goldens/tiny_fixtures.py writes): an image_url part is
# refused with HTTP 400 naming why (the vision tower is not computed), and a text request on the same server runs
# to PyTorch's greedy tokens (tests/golden/qwen2vl.json's first case; tests/model/test_qwen2vl.c checks the logits).
. "$(dirname "$0")/serve_lib.sh"
python3 scripts/goldens/tiny_fixtures.py qwen2_vl "$tmp/q2vl" || { bad "the fixture is written"; echo "serve_qwen2vl: $pass passed, $fail failed"; exit 1; }
start_server q2vl "$tmp/q2vl" --threads 1 || { bad "serve starts"; echo "serve_qwen2vl: $pass passed, $fail failed"; exit 1; }
img='{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}'
code=$(post /v1/chat/completions "$img" "$tmp/img.json")
check "an image_url part is refused, HTTP 400 naming why ($(jv "$tmp/img.json" "d['error']['message']"))" \
    [ "$code" = 400 -a "$(jv "$tmp/img.json" "'vision tower is not computed' in d['error']['message'] and d['error']['param'] == 'messages[0].content[1]'")" = true ]
ids=$(python3 -c "import json; c=json.load(open('tests/golden/qwen2vl.json'))['variants'][0]['cases'][0]; print(json.dumps(c['prompt_ids']))")
want=$(python3 -c "import json; c=json.load(open('tests/golden/qwen2vl.json'))['variants'][0]['cases'][0]; print(json.dumps(c['tokens']))")
code=$(post /v1/completions "{\"prompt\":$ids,\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true,\"return_tokens\":true}" "$tmp/txt.json")
got=$(jv "$tmp/txt.json" "d['choices'][0]['tokens']")
check "a text request on the same server: PyTorch's 16 greedy tokens (HTTP $code)" [ "$code" = 200 -a "$got" = "$want" ]
stop_servers
echo "serve_qwen2vl: $pass passed, $fail failed"
[ $fail -eq 0 ]
