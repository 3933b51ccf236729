#!/usr/bin/env bash
# caldrix run --chat: the model's chat template around the message, rendered as Python Jinja2 renders
# it (../shared/fixtures/chat/qwen3/cases.jsonl, single_user_gen and system_user_gen), tokenized
# without added specials. The model: the qwen3 fixture's weights with Qwen3's tokenizer cut to its
# 320 ids (tests/cli/make_qwen3_chat_model.sh).
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
HF=../shared/fixtures/hf; TK=../shared/fixtures/tokenizers
D=$tmp/qwen3chat
source tests/cli/make_qwen3_chat_model.sh
make_qwen3_chat_model "$D"
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
"$CALDRIX" run --chat -p hi -n 2 >/dev/null 2>"$tmp/e"; rc=$?
[ $rc = 0 ] && grep -q "no chat template; chat uses ChatML" "$tmp/e" && ok "--chat on a model without a template uses ChatML and says so (as serve)" ||
    bad "--chat on a model without a template uses ChatML and says so (rc $rc: $(cat "$tmp/e"))"
"$CALDRIX" run "$D" --chat --prompt-ids 1,2 >/dev/null 2>"$tmp/e"; rc=$?
[ $rc = 2 ] && ok "--chat with --prompt-ids is a usage error" || bad "--chat with --prompt-ids is a usage error"
# interactive chat (-i: every stdin line is a turn). Turn 2 renders the whole conversation through the
# template, finds the cached prefix (the engine's prefix sharing) and computes only the rest: its prompt
# must be the template's rendering of [user, assistant reply, user] and its reply what a fresh run of
# that prompt gives.
printf 'Hello there!\nWhat is 2+2?\n/clear\nHello there!\n' |
    "$CALDRIX" run "$D" -i --temp 0 -n 8 --json >"$tmp/i.jsonl" 2>"$tmp/err"; rc=$?
[ $rc = 0 ] && [ "$(wc -l <"$tmp/i.jsonl")" = 3 ] && ok "-i answers every line of standard input" ||
    { bad "-i answers every line of standard input (rc $rc)"; cat "$tmp/err"; }
python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
turns = [json.loads(l) for l in open(t + '/i.jsonl')]
json.dump([{'role': 'user', 'content': 'Hello there!'}, {'role': 'assistant', 'content': turns[0]['text']},
           {'role': 'user', 'content': 'What is 2+2?'}], open(t + '/conv.json', 'w'))
open(t + '/ids1', 'w').write(','.join(map(str, turns[1]['prompt'])))
PY
"$CALDRIX" template "$D" --messages "$tmp/conv.json" >"$tmp/conv.txt" 2>/dev/null
python3 -c "import json; print(json.dumps({'text': open('$tmp/conv.txt').read(), 'add_special_tokens': False}))" |
    "$CALDRIX" tokenize "$D" --jsonl >"$tmp/conv.jsonl" 2>/dev/null
"$CALDRIX" run "$D" --prompt-ids "$(cat "$tmp/ids1")" --temp 0 -n 8 --json >"$tmp/fresh.json" 2>/dev/null
"$CALDRIX" run "$D" --chat -p 'Hello there!' --temp 0 -n 8 --json >"$tmp/one.json" 2>/dev/null
python3 - "$tmp" <<'PY' && ok "-i keeps the cache across turns and matches fresh runs" || bad "-i keeps the cache across turns and matches fresh runs"
import json, sys
t = sys.argv[1]
turns = [json.loads(l) for l in open(t + '/i.jsonl')]
conv = json.loads(open(t + '/conv.jsonl').readline())['ids']
fresh = json.load(open(t + '/fresh.json')); one = json.load(open(t + '/one.json'))
checks = [
    ('turn 0 prompt = one-shot --chat prompt', turns[0]['prompt'] == one['prompt']),
    ('turn 0 reply = one-shot reply', turns[0]['tokens'] == one['tokens'] and len(one['tokens']) > 0),
    ('turn 1 prompt = template rendering of the conversation', turns[1]['prompt'] == conv),
    # the engine shares whole blocks of 16 positions: turn 1 finds at least the full blocks of turn 0's prompt
    ('turn 1 reused the cached turn-0 prompt', turns[1]['reused'] >= len(turns[0]['prompt']) // 16 * 16 > 0),
    ('turn 1 reply = fresh run of its prompt', turns[1]['tokens'] == fresh['tokens']),
    # after /clear the conversation is turn 0's again, whose blocks the cache still holds
    ('/clear starts over', turns[2]['prompt'] == one['prompt'] and turns[2]['tokens'] == one['tokens']
     and turns[2]['reused'] == (len(one['prompt']) - 1) // 16 * 16),
]
for name, good in checks:
    print(('  ok: ' if good else '  FAILED: ') + name)
sys.exit(0 if all(g for _, g in checks) else 1)
PY
# on a terminal, --chat without -p is the interactive chat: a prompt, Ctrl-C stops a reply, /exit quits
python3 - "$CALDRIX" "$D" <<'PY' && ok "--chat on a terminal chats; Ctrl-C stops a reply; /exit quits" || bad "--chat on a terminal chats; Ctrl-C stops a reply; /exit quits"
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], 'run', sys.argv[2], '--chat', '--temp', '0', '--ignore-eos', '--ctx', '60000'])
out = b''
def read_for(secs):
    global out
    end = time.time() + secs
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                out += os.read(fd, 65536)
            except OSError:
                return
read_for(1.0); os.write(fd, b'Hello!\n'); read_for(0.5)
os.write(fd, b'\x03'); read_for(1.0)
os.write(fd, b'/exit\n'); read_for(1.0)
_, status = os.waitpid(pid, 0)
text = out.decode('utf-8', 'replace')
good = status == 0 and text.count('> ') >= 2 and 'reply stopped' in text
if not good:
    print(repr(text[-400:]), status)
sys.exit(0 if good else 1)
PY
# failures are not successes (issue 12 item 4)
printf 'hello\n' | "$CALDRIX" run "$D" -i --ctx 10 >/dev/null 2>"$tmp/e"; rc=$?
[ $rc = 1 ] && grep -q "more than the context" "$tmp/e" && ok "-i where every turn failed exits 1" || bad "-i where every turn failed exits 1 (rc $rc)"
"$CALDRIX" run "$D" --chat </dev/null >/dev/null 2>"$tmp/e"; rc=$?
[ $rc = 1 ] && grep -q "empty" "$tmp/e" && ok "--chat with an empty message is refused" || bad "--chat with an empty message is refused (rc $rc)"
printf 'hi\n' | "$CALDRIX" run "$D" -i -p hi >/dev/null 2>"$tmp/e"; rc=$?
[ $rc = 2 ] && ok "-i with -p is a usage error" || bad "-i with -p is a usage error"
echo "chat: $pass passed, $fail failed"
[ $fail -eq 0 ]
