#!/usr/bin/env bash
# caldrix run --chat: the model's chat template around the message, rendered as Python Jinja2 renders
# it (../shared/fixtures/chat/qwen3/cases.jsonl, single_user_gen and system_user_gen), tokenized
# without added specials. The model: the qwen3 fixture's weights with Qwen3's tokenizer cut to its
# 320 ids (as tests/cli/test_convert.sh builds it).
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
HF=../shared/fixtures/hf; TK=../shared/fixtures/tokenizers
D=$tmp/qwen3chat; mkdir -p "$D"
cp $HF/qwen3/config.json $HF/qwen3/generation_config.json $HF/qwen3/model.safetensors "$D/"
python3 - $TK/qwen3 "$D" <<'PY'
import json, sys
src, dst = sys.argv[1], sys.argv[2]
t = json.load(open(src + '/tokenizer.json')); c = json.load(open(src + '/tokenizer_config.json'))
N = 294
vocab = {k: v for k, v in t['model']['vocab'].items() if v < N}
t['model']['vocab'] = vocab
t['model']['merges'] = [m for m in t['model']['merges'] if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
remap = {}
for j, a in enumerate(t['added_tokens']):
    remap[str(a['id'])] = str(N + j); a['id'] = N + j
c['added_tokens_decoder'] = {remap[k]: v for k, v in c['added_tokens_decoder'].items()}
json.dump(t, open(dst + '/tokenizer.json', 'w'), ensure_ascii=False)
json.dump(c, open(dst + '/tokenizer_config.json', 'w'), ensure_ascii=False)
PY
for name in single_user_gen system_user_gen; do
    python3 - ../shared/fixtures/chat/qwen3/cases.jsonl $name "$tmp" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    c = json.loads(l)
    if c['name'] == sys.argv[2]:
        m = c['messages']
        open(sys.argv[3] + '/user', 'w').write(m[-1]['content'])
        open(sys.argv[3] + '/system', 'w').write(m[0]['content'] if m[0]['role'] == 'system' else '')
        json.dump({'text': c['rendered'], 'add_special_tokens': False}, open(sys.argv[3] + '/in.jsonl', 'w'))
PY
    "$CALDRIX" tokenize "$D" --jsonl <"$tmp/in.jsonl" >"$tmp/want.jsonl" 2>/dev/null
    sys=(); [ -s "$tmp/system" ] && sys=(--system "$(cat "$tmp/system")")
    "$CALDRIX" run "$D" --chat "${sys[@]}" -p "$(cat "$tmp/user")" -n 4 --temp 0 --json >"$tmp/o.json" 2>"$tmp/err"
    python3 -c "
import json,sys
w=json.loads(open('$tmp/want.jsonl').readline())['ids']; o=json.load(open('$tmp/o.json'))['prompt']
sys.exit(0 if w==o and len(w)>3 else 1)" && ok "--chat renders $name as Jinja2 does" || { bad "--chat renders $name as Jinja2 does"; cat "$tmp/err"; }
done
# the message can come from standard input
printf 'Hello!\n' | "$CALDRIX" run "$D" --chat -n 4 --temp 0 --json >"$tmp/o2.json" 2>/dev/null
"$CALDRIX" run "$D" --chat -p 'Hello!' -n 4 --temp 0 --json >"$tmp/o3.json" 2>/dev/null
python3 -c "
import json,sys
sys.exit(0 if json.load(open('$tmp/o2.json'))['prompt']==json.load(open('$tmp/o3.json'))['prompt'] else 1)" &&
    ok "--chat reads the message from standard input" || bad "--chat reads the message from standard input"
"$CALDRIX" run --chat -p hi >/dev/null 2>"$tmp/e"; rc=$?
[ $rc = 1 ] && grep -q "chat template" "$tmp/e" && ok "--chat on a model without a template is refused" || bad "--chat on a model without a template is refused"
"$CALDRIX" run "$D" --chat --prompt-ids 1,2 >/dev/null 2>"$tmp/e"; rc=$?
[ $rc = 2 ] && ok "--chat with --prompt-ids is a usage error" || bad "--chat with --prompt-ids is a usage error"
echo "chat: $pass passed, $fail failed"
[ $fail -eq 0 ]
