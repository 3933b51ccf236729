#!/usr/bin/env bash
# Images through the text paths of a vision model: a SmolVLM-shaped checkpoint (caldrix synth
# --shape smolvlm-tiny: SmolVLM's vocabulary and special ids on a tiny random model) with SmolLM2's
# tokenizer (../shared/fixtures/tokenizers/smollm2) plus SmolVLM's added tokens and SmolVLM's chat
# template. `run --chat -p TEXT --image F`, `run -p "<image>TEXT"`, `run -i` with /image and the
# server's image_url parts must each give the prompt that the expansion rule (written out here from
# processing_idefics3.py) and the tokenizer give, and the same tokens as `run --prompt-ids` with
# that prompt. The expansion itself is checked against the PyTorch fixture in tests/image.
cd "$(dirname "$0")/../.."
. tests/server/serve_lib.sh
F=../shared/fixtures/hf/idefics3
M=$tmp/smolvlm
"$CALDRIX" synth "$M" --shape smolvlm-tiny 2>/dev/null || { bad "synth smolvlm-tiny"; echo "$pass passed, $fail failed"; exit 1; }
python3 - "$M" <<'PY'
import json, sys
M = sys.argv[1]
t = json.load(open('../shared/fixtures/tokenizers/smollm2/tokenizer.json'))
add = [('<global-img>', 49152)] + [('<row_%d_col_%d>' % (r, c), 49153 + 6 * (r - 1) + (c - 1))
       for r in range(1, 7) for c in range(1, 7)] + [('<fake_token_around_image>', 49189), ('<image>', 49190),
                                                     ('<end_of_utterance>', 49279)]
for s, i in add:
    t['added_tokens'].append({'id': i, 'content': s, 'single_word': False, 'lstrip': False, 'rstrip': False,
                              'normalized': False, 'special': True})
json.dump(t, open(M + '/tokenizer.json', 'w'))
tmpl = ("<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]['type'] == 'image' %}"
        "{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
        "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
        "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}")
json.dump({"chat_template": tmpl, "eos_token": "<end_of_utterance>", "bos_token": "<|im_start|>"},
          open(M + '/tokenizer_config.json', 'w'))
PY
IMG=$F/img_b_128x128.png   # 128 x 128 with tiles of 64: a 2 x 2 grid + the global image
Q="What is in it?"
expand='def ex(rows, cols, n=4):
    s = ""
    for r in range(rows):
        for c in range(cols):
            s += "<fake_token_around_image><row_%d_col_%d>" % (r + 1, c + 1) + "<image>" * n
        s += "\n" if r < rows - 1 else "\n\n"
    return s + "<fake_token_around_image><global-img>" + "<image>" * n + "<fake_token_around_image>"'
chat_text=$(python3 -c "$expand
import sys; sys.stdout.write('<|im_start|>User:' + ex(2, 2) + '$Q<end_of_utterance>\nAssistant:')")
plain_text=$(python3 -c "$expand
import sys; sys.stdout.write(ex(2, 2) + '$Q')")
want_chat=$("$CALDRIX" tokenize "$M" --no-special --json "$chat_text")
want_plain=$("$CALDRIX" tokenize "$M" --json "$plain_text")
n_img=$(python3 -c "print(sum(1 for i in $want_chat if i == 49190))")
[ "$n_img" = 20 ] && ok "the expected chat prompt holds 20 image tokens" || bad "expected prompt has $n_img image tokens"

"$CALDRIX" run "$M" --chat -p "$Q" --image "$IMG" -n 4 --temp 0 --ignore-eos --json >"$tmp/chat.json" 2>"$tmp/err"
got=$(jv "$tmp/chat.json" "d['prompt']")
[ "$got" = "$(python3 -c "import json; print(json.dumps($want_chat))")" ] && ok "run --chat --image: the template's image part, expanded, then tokenized" \
    || { bad "run --chat --image prompt"; echo "got  $got"; echo "want $want_chat"; cat "$tmp/err"; }
toks=$(jv "$tmp/chat.json" "d['tokens']")
"$CALDRIX" run "$M" --prompt-ids "$(python3 -c "print(','.join(map(str, $want_chat)))")" --image "$IMG" -n 4 --temp 0 --ignore-eos --json >"$tmp/ids.json" 2>"$tmp/err"
[ "$(jv "$tmp/ids.json" "d['tokens']")" = "$toks" ] && ok "run --prompt-ids with that prompt gives the same tokens" || { bad "--prompt-ids tokens"; cat "$tmp/err"; }

"$CALDRIX" run "$M" -p "<image>$Q" --image "$IMG" -n 4 --temp 0 --ignore-eos --json >"$tmp/plain.json" 2>"$tmp/err"
[ "$(jv "$tmp/plain.json" "d['prompt']")" = "$(python3 -c "import json; print(json.dumps($want_plain))")" ] \
    && ok "run -p with an <image> marker: expanded in place" || { bad "run -p <image>"; cat "$tmp/err"; }
"$CALDRIX" run "$M" -p "$Q" --image "$IMG" -n 4 --temp 0 --ignore-eos --json >"$tmp/first.json" 2>"$tmp/err"
[ "$(jv "$tmp/first.json" "d['prompt']")" = "$(jv "$tmp/plain.json" "d['prompt']")" ] \
    && ok "run -p without a marker: the image comes first" || { bad "run -p without marker"; cat "$tmp/err"; }
"$CALDRIX" run "$M" -p "<image><image>$Q" --image "$IMG" -n 1 >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "2 <image> markers and there are 1 images" "$tmp/err" && ok "more markers than images is refused" || { bad "marker count (exit $rc)"; cat "$tmp/err"; }

printf '/image %s\n%s\n' "$IMG" "$Q" | "$CALDRIX" run "$M" -i -n 4 --temp 0 --ignore-eos --json >"$tmp/i.jsonl" 2>"$tmp/err"
head -1 "$tmp/i.jsonl" > "$tmp/i0.json"
[ "$(jv "$tmp/i0.json" "d['prompt']")" = "$(jv "$tmp/chat.json" "d['prompt']")" ] && [ "$(jv "$tmp/i0.json" "d['tokens']")" = "$toks" ] \
    && ok "run -i: /image attaches the image to the next message (same prompt and tokens as --chat)" || { bad "run -i /image"; cat "$tmp/i.jsonl" "$tmp/err"; }
printf '/image %s\n' "$tmp/nothing.png" | "$CALDRIX" run "$M" -i -n 1 >/dev/null 2>"$tmp/err"
grep -q "/image: .*nothing.png" "$tmp/err" && ok "run -i: a missing /image file is reported" || { bad "run -i bad /image"; cat "$tmp/err"; }

start_server vlmchat "$M" --threads 2 || { echo "$pass passed, $((fail+1)) failed"; exit 1; }
python3 - "$IMG" "$Q" > "$tmp/body.json" <<'PY'
import base64, json, sys
u = "data:image/png;base64," + base64.b64encode(open(sys.argv[1], 'rb').read()).decode()
print(json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}},
                                                              {"type": "text", "text": sys.argv[2]}]}],
                  "max_tokens": 4, "temperature": 0, "ignore_eos": True, "return_tokens": True}))
PY
code=$(post /v1/chat/completions "@$tmp/body.json" "$tmp/srv.json")
[ "$code" = 200 ] && [ "$(jv "$tmp/srv.json" "d['choices'][0]['tokens']")" = "$toks" ] \
    && [ "$(jv "$tmp/srv.json" "d['usage']['prompt_tokens']")" = "$(python3 -c "print(len($want_chat))")" ] \
    && ok "serve: a chat image_url part gives the prompt and tokens of run --chat --image" || { bad "serve chat image (HTTP $code)"; cat "$tmp/srv.json"; echo; }
stop_servers
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
