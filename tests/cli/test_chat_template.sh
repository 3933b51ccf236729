#!/usr/bin/env bash
# Issue 35 item 6: one rule for the chat template of `run --chat` and `serve` (cdx_chat_setup_open):
# --chat-template FILE, else the model's template, else ChatML, said on stderr; and
# --chat-template-kwargs JSON as extra template variables (transformers' apply_chat_template
# kwargs). Goldens: Python Jinja2's renderings of Qwen3's template (../shared/fixtures/chat/qwen3,
# single_user_gen and thinking_disabled_gen with enable_thinking false), tokenized without added
# specials; ChatML as llama.cpp's server and transformers write it. The model: the qwen3 fixture's
# weights with Qwen3's tokenizer cut to its 320 ids (tests/cli/make_qwen3_chat_model.sh), with and
# without its chat template.
# isa-neutral: template rendering and tokenization
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
HF=../shared/fixtures/hf; TK=../shared/fixtures/tokenizers; CT=../shared/fixtures/chat/qwen3
source tests/cli/make_qwen3_chat_model.sh
D=$tmp/with; N=$tmp/without
make_qwen3_chat_model "$D"
make_qwen3_chat_model "$N"
python3 - "$N/tokenizer_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); del c['chat_template']; json.dump(c, open(sys.argv[1], 'w'), ensure_ascii=False)
PY
# the goldens: the user message of each case, and its Jinja2 rendering as token ids
python3 - "$CT/cases.jsonl" "$tmp" <<'PY'
import json, sys
cases = {c['name']: c for c in map(json.loads, open(sys.argv[1]))}
t = sys.argv[2]
for name in ('single_user_gen', 'thinking_disabled_gen', 'thinking_enabled_gen'):
    c = cases[name]
    assert [m['role'] for m in c['messages']] == ['user'] and c['add_generation_prompt']
    open(f'{t}/{name}.msg', 'w').write(c['messages'][0]['content'])
    open(f'{t}/{name}.jsonl', 'w').write(json.dumps({'text': c['rendered'], 'add_special_tokens': False}) + '\n')
assert cases['thinking_enabled_gen']['messages'] == cases['thinking_disabled_gen']['messages']
assert cases['thinking_disabled_gen']['extra']['enable_thinking'] is False
msg = cases['thinking_disabled_gen']['messages'][0]['content']
chatml = '<|im_start|>user\n' + msg + '<|im_end|>\n<|im_start|>assistant\n'
open(f'{t}/chatml.jsonl', 'w').write(json.dumps({'text': chatml, 'add_special_tokens': True}) + '\n')
PY
for g in single_user_gen thinking_disabled_gen thinking_enabled_gen chatml; do
    "$CALDRIX" tokenize "$D" --jsonl <"$tmp/$g.jsonl" | python3 -c "import json,sys; print(','.join(map(str, json.loads(sys.stdin.readline())['ids'])))" >"$tmp/$g.ids"
done
MSG=$(cat "$tmp/single_user_gen.msg") HI=$(cat "$tmp/thinking_disabled_gen.msg")
same_ids() { python3 -c "import json,sys; sys.exit(0 if json.load(open('$1'))['prompt'] == [int(x) for x in open('$2').read().split(',')] else 1)"; }

# ---- run ----
"$CALDRIX" run "$N" --chat -p "$HI" -n 4 --temp 0 --json >"$tmp/r_chatml.json" 2>"$tmp/e"; rc=$?
[ $rc = 0 ] && grep -q "no chat template; chat uses ChatML" "$tmp/e" && same_ids "$tmp/r_chatml.json" "$tmp/chatml.ids" &&
    ok "run --chat, no template: ChatML with the tokenizer's own specials, said on stderr" || { bad "run --chat, no template: ChatML (rc $rc)"; cat "$tmp/e"; }
"$CALDRIX" run "$N" --chat --chat-template "$CT/template.jinja" -p "$MSG" -n 4 --temp 0 --json >"$tmp/r_file.json" 2>"$tmp/e"; rc=$?
[ $rc = 0 ] && ! grep -q ChatML "$tmp/e" && same_ids "$tmp/r_file.json" "$tmp/single_user_gen.ids" &&
    ok "run --chat --chat-template FILE renders as Jinja2 does" || { bad "run --chat --chat-template FILE (rc $rc)"; cat "$tmp/e"; }
"$CALDRIX" run "$N" --chat --chat-template "$CT/template.jinja" --chat-template-kwargs '{"enable_thinking": false}' -p "$HI" -n 4 --temp 0 --json >"$tmp/r_kw.json" 2>"$tmp/e"; rc=$?
[ $rc = 0 ] && same_ids "$tmp/r_kw.json" "$tmp/thinking_disabled_gen.ids" &&
    ok "run --chat-template-kwargs '{\"enable_thinking\": false}' renders as Jinja2 does" || { bad "run --chat-template-kwargs (rc $rc)"; cat "$tmp/e"; }
"$CALDRIX" run "$D" --chat --chat-template-kwargs '{"enable_thinking": false}' -p "$HI" -n 4 --temp 0 --json >"$tmp/r_kw2.json" 2>/dev/null
same_ids "$tmp/r_kw2.json" "$tmp/thinking_disabled_gen.ids" && ok "run --chat-template-kwargs with the model's own template" || bad "run --chat-template-kwargs with the model's own template"
printf '{%% for m in messages %%}{{ m.content ' >"$tmp/broken.jinja"
for args in "--chat-template $tmp/nonexistent.jinja" "--chat-template $tmp/broken.jinja"; do
    "$CALDRIX" run "$N" --chat $args -p hi -n 2 >/dev/null 2>"$tmp/e"; rc=$?
    f=${args#--chat-template }
    [ $rc = 1 ] && grep -q -- "--chat-template: $f" "$tmp/e" && ok "run $args is refused, naming the file" || { bad "run $args (rc $rc)"; cat "$tmp/e"; }
done
"$CALDRIX" run "$N" --chat-template "$CT/template.jinja" -p hi >/dev/null 2>"$tmp/e"; rc=$?
[ $rc = 2 ] && grep -q "needs --chat" "$tmp/e" && ok "--chat-template without --chat is a usage error" || bad "--chat-template without --chat (rc $rc)"
"$CALDRIX" run "$N" --chat --chat-template-kwargs '[1]' -p hi >/dev/null 2>"$tmp/e"; rc=$?
[ $rc = 2 ] && grep -q "expected a JSON object" "$tmp/e" && ok "--chat-template-kwargs must be a JSON object" || bad "--chat-template-kwargs [1] (rc $rc)"
# a template that does not parse falls back to ChatML under the same rule
mkdir -p "$tmp/badtmpl"; cp "$N"/* "$tmp/badtmpl/"; cp "$tmp/broken.jinja" "$tmp/badtmpl/chat_template.jinja"
"$CALDRIX" run "$tmp/badtmpl" --chat -p "$HI" -n 4 --temp 0 --json >"$tmp/r_bad.json" 2>"$tmp/e"; rc=$?
[ $rc = 0 ] && grep -q "does not parse" "$tmp/e" && same_ids "$tmp/r_bad.json" "$tmp/chatml.ids" &&
    ok "run --chat, a template that does not parse: ChatML, said on stderr" || { bad "run --chat, a template that does not parse (rc $rc)"; cat "$tmp/e"; }

# ---- serve: the same rule ----
# the same prompt gives the same greedy tokens: each serve reply is compared with run's on the golden ids
"$CALDRIX" run "$N" --prompt-ids "$(cat "$tmp/thinking_disabled_gen.ids")" -n 6 --temp 0 --json >"$tmp/g_off.json" 2>/dev/null
"$CALDRIX" run "$N" --prompt-ids "$(cat "$tmp/thinking_enabled_gen.ids")" -n 6 --temp 0 --json >"$tmp/g_on.json" 2>/dev/null
"$CALDRIX" run "$N" --prompt-ids "$(cat "$tmp/chatml.ids")" -n 6 --temp 0 --json >"$tmp/g_chatml.json" 2>/dev/null
BODY=$(python3 -c "import json,sys; print(json.dumps({'messages':[{'role':'user','content':open('$tmp/thinking_disabled_gen.msg').read()}],'max_tokens':6,'temperature':0,'return_tokens':True,'ignore_eos':True}))")
BODY_ON=$(python3 -c "import json; b=json.loads('''$BODY'''); b['chat_template_kwargs']={'enable_thinking': True}; print(json.dumps(b))")
serve_same() { # reply file, golden run file, golden ids file
    python3 -c "
import json,sys
r=json.load(open('$1')); g=json.load(open('$2')); ids=open('$3').read().split(',')
sys.exit(0 if r['usage']['prompt_tokens']==len(ids) and r['choices'][0]['tokens']==g['tokens'] and len(g['tokens'])>0 else 1)"
}
if start_server tmplfile "$N" --threads 1 --chat-template "$CT/template.jinja" --chat-template-kwargs '{"enable_thinking": false}'; then
    post /v1/chat/completions "$BODY" "$tmp/s_off.json" >/dev/null
    post /v1/chat/completions "$BODY_ON" "$tmp/s_on.json" >/dev/null
    serve_same "$tmp/s_off.json" "$tmp/g_off.json" "$tmp/thinking_disabled_gen.ids" &&
        ok "serve --chat-template FILE --chat-template-kwargs: the prompt Jinja2 renders" || { bad "serve --chat-template FILE --chat-template-kwargs"; cat "$tmp/s_off.json"; }
    serve_same "$tmp/s_on.json" "$tmp/g_on.json" "$tmp/thinking_enabled_gen.ids" &&
        ok "serve: a request's chat_template_kwargs override the server's" || { bad "serve: a request's chat_template_kwargs override"; cat "$tmp/s_on.json"; }
    curl -s -m 5 "$URL/v1/models" -o "$tmp/m.json"
    check "serve --chat-template: /v1/models says chat_template true" [ "$(jv "$tmp/m.json" "d['data'][0]['chat_template']")" = true ]
else
    bad "serve --chat-template FILE --chat-template-kwargs starts"
fi
stop_servers
if start_server chatml "$N" --threads 1; then
    post /v1/chat/completions "$BODY" "$tmp/s_chatml.json" >/dev/null
    serve_same "$tmp/s_chatml.json" "$tmp/g_chatml.json" "$tmp/chatml.ids" && grep -q "no chat template; chat uses ChatML" "$tmp/chatml.log" &&
        ok "serve, no template: ChatML as run --chat gives it, said on stderr" || { bad "serve, no template: ChatML"; cat "$tmp/s_chatml.json" "$tmp/chatml.log"; }
else
    bad "serve without a template starts"
fi
stop_servers
"$CALDRIX" serve "$N" --port 0 --chat-template "$tmp/broken.jinja" >"$tmp/o" 2>"$tmp/e" & p=$!
for _ in $(seq 100); do kill -0 $p 2>/dev/null || break; sleep 0.1; done
kill $p 2>/dev/null; wait $p; rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q -- "--chat-template: $tmp/broken.jinja" "$tmp/e" && ok "serve --chat-template with a broken file exits non-zero, naming it" ||
    { bad "serve --chat-template broken (rc $rc)"; cat "$tmp/e"; }
echo "chat_template: $pass passed, $fail failed"
