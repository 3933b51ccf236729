#!/usr/bin/env bash
# caldrix template, end to end: a model folder, --template, --set, --no-generation-prompt, errors.
# Expected outputs are the fixtures' Python Jinja2 renderings (../shared/fixtures/chat).
set -u
cd "$(dirname "$0")/../.."
CALDRIX=${CALDRIX:-build/caldrix}
CHAT=../shared/fixtures/chat
pass=0; fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }

# case N of a fixture: messages to a file, the expected text to another, extra as --set flags
case_files() { # folder index
    python3 - "$CHAT/$1/cases.jsonl" "$2" "$tmp" <<'EOF'
import json, sys, shlex
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
c = json.loads(lines[int(sys.argv[2])])
d = sys.argv[3]
json.dump(c["messages"], open(d + "/messages.json", "w", encoding="utf-8"), ensure_ascii=False)
open(d + "/want.txt", "w", encoding="utf-8", newline="").write(c.get("rendered", ""))
open(d + "/want_err.txt", "w", encoding="utf-8").write(c.get("error", ""))
open(d + "/gen", "w").write("" if c["add_generation_prompt"] else "--no-generation-prompt")
with open(d + "/sets", "w", encoding="utf-8") as f:
    for k, v in c["extra"].items():
        f.write(k + "=" + json.dumps(v, ensure_ascii=False) + "\n")
EOF
}

run_case() { # folder index [model-dir]
    case_files "$1" "$2"
    local args=()
    while IFS= read -r kv; do [ -n "$kv" ] && args+=(--set "$kv"); done < "$tmp/sets"
    local gen; gen=$(cat "$tmp/gen")
    if [ -n "${3:-}" ]; then
        "$CALDRIX" template "$3" --messages "$tmp/messages.json" $gen "${args[@]}" > "$tmp/got.txt" 2> "$tmp/err.txt"
    else
        "$CALDRIX" template --template "$CHAT/$1/template.jinja" --messages "$tmp/messages.json" $gen "${args[@]}" \
            > "$tmp/got.txt" 2> "$tmp/err.txt"
    fi
}

if [ ! -d "$CHAT" ]; then
    echo "missing $CHAT"; echo "template_cli: 0 passed, 1 failed"; exit 1
fi

# 1. --template with every fixture's first case, byte for byte
for d in "$CHAT"/*/; do
    m=$(basename "$d")
    run_case "$m" 0
    rc=$?
    if [ -s "$tmp/want_err.txt" ]; then
        if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -qF -- "$(cat "$tmp/want_err.txt")" "$tmp/err.txt"; then
            ok "$m case 0 fails with the template's message"
        else bad "$m case 0: rc $rc, stderr: $(head -c 300 "$tmp/err.txt")"; fi
    elif [ $rc -eq 0 ] && cmp -s "$tmp/want.txt" "$tmp/got.txt"; then ok "$m case 0 renders byte for byte"
    else bad "$m case 0: rc $rc $(head -c 300 "$tmp/err.txt")"; fi
done

# 2. MODEL as a folder: deepseek's tokenizer_config.json supplies the template and bos_token
run_case deepseek-r1-distill-qwen 1 "$CHAT/deepseek-r1-distill-qwen"
if [ $? -eq 0 ] && cmp -s "$tmp/want.txt" "$tmp/got.txt"; then ok "a model folder's tokenizer_config.json template renders"
else bad "model folder render: $(head -c 300 "$tmp/err.txt")"; fi
# without --set bos_token the folder's own token must appear
"$CALDRIX" template "$CHAT/deepseek-r1-distill-qwen" --messages "$tmp/messages.json" > "$tmp/got2.txt" 2>&1
if head -c 40 "$tmp/got2.txt" | grep -q "begin▁of▁sentence"; then ok "special tokens come from the model folder"
else bad "special tokens from the folder: $(head -c 200 "$tmp/got2.txt")"; fi

# 3. --no-generation-prompt and no trailing newline added
echo '[{"role":"user","content":"Hi"}]' > "$tmp/m.json"
"$CALDRIX" template --template "$CHAT/qwen2.5/template.jinja" --messages "$tmp/m.json" --no-generation-prompt > "$tmp/o.txt"
printf '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n' > "$tmp/w.txt"
if cmp -s "$tmp/o.txt" "$tmp/w.txt"; then ok "--no-generation-prompt, and no newline added"; else bad "--no-generation-prompt"; fi

# 4. --set overrides and adds variables
printf '{{ bos_token }}|{{ enable_thinking }}|{{ tools|length }}|{{ documents }}|{{ add_generation_prompt }}' > "$tmp/t.jinja"
"$CALDRIX" template --template "$tmp/t.jinja" --messages "$tmp/m.json" --set bos_token='"<B>"' --set enable_thinking=false \
    --set 'tools=[{"a":1},{"b":2}]' > "$tmp/o.txt"
if [ "$(cat "$tmp/o.txt")" = "<B>|False|2|None|True" ]; then ok "--set passes JSON values"; else bad "--set: $(cat "$tmp/o.txt")"; fi

# 5. errors: a syntax error names line and column; raise_exception; bad usage; bad JSON
printf 'ok\n{%% for x in %%}' > "$tmp/bad.jinja"
"$CALDRIX" template --template "$tmp/bad.jinja" --messages "$tmp/m.json" > /dev/null 2> "$tmp/e.txt"; rc=$?
if [ $rc -eq 1 ] && grep -q "line 2 col" "$tmp/e.txt"; then ok "a syntax error exits 1 naming line and column"; else bad "syntax error rc $rc: $(cat "$tmp/e.txt")"; fi
printf '{{ raise_exception("no way") }}' > "$tmp/r.jinja"
"$CALDRIX" template --template "$tmp/r.jinja" --messages "$tmp/m.json" > "$tmp/o.txt" 2> "$tmp/e.txt"; rc=$?
if [ $rc -eq 1 ] && grep -q "no way" "$tmp/e.txt" && [ ! -s "$tmp/o.txt" ]; then ok "raise_exception exits 1 with its message and no output"
else bad "raise_exception rc $rc"; fi
"$CALDRIX" template --template "$tmp/t.jinja" > /dev/null 2>&1; rc=$?
if [ $rc -eq 2 ]; then ok "missing --messages is a usage error (exit 2)"; else bad "usage rc $rc"; fi
"$CALDRIX" template --template "$tmp/t.jinja" --messages "$tmp/m.json" --set 'x={bad' > /dev/null 2>&1; rc=$?
if [ $rc -eq 2 ]; then ok "--set with bad JSON is a usage error"; else bad "--set bad JSON rc $rc"; fi
echo '{"not": "a list"}' > "$tmp/nl.json"
"$CALDRIX" template --template "$tmp/t.jinja" --messages "$tmp/nl.json" > /dev/null 2>&1; rc=$?
if [ $rc -eq 1 ]; then ok "messages that are not a list are refused"; else bad "messages not a list rc $rc"; fi
"$CALDRIX" template "$tmp/nowhere" --messages "$tmp/m.json" > /dev/null 2> "$tmp/e.txt"; rc=$?
if [ $rc -eq 1 ] && grep -q "nowhere" "$tmp/e.txt"; then ok "a missing model is named"; else bad "missing model rc $rc"; fi
# 6. --name: a name the model has picks it; one it lacks exits 2 naming it, never a silent fallback
mkdir -p "$tmp/named" "$tmp/jinja"
printf '{"chat_template":[{"name":"default","template":"D{{ messages|length }}"},{"name":"tool_use","template":"T{{ messages|length }}"}]}' > "$tmp/named/tokenizer_config.json"
"$CALDRIX" template "$tmp/named" --messages "$tmp/m.json" --name tool_use > "$tmp/o.txt" 2> "$tmp/e.txt"; rc=$?
if [ $rc -eq 0 ] && [ "$(cat "$tmp/o.txt")" = "T1" ]; then ok "--name picks the named template"; else bad "--name tool_use rc $rc: $(cat "$tmp/o.txt" "$tmp/e.txt")"; fi
"$CALDRIX" template "$tmp/named" --messages "$tmp/m.json" --name nope > "$tmp/o.txt" 2> "$tmp/e.txt"; rc=$?
if [ $rc -eq 2 ] && grep -q '"nope"' "$tmp/e.txt" && [ ! -s "$tmp/o.txt" ]; then ok "an unknown --name of a folder's template list exits 2 naming it"
else bad "--name nope (list) rc $rc: $(cat "$tmp/e.txt")"; fi
printf 'J{{ messages|length }}' > "$tmp/jinja/chat_template.jinja"
"$CALDRIX" template "$tmp/jinja" --messages "$tmp/m.json" --name tool_use > "$tmp/o.txt" 2> "$tmp/e.txt"; rc=$?
if [ $rc -eq 2 ] && grep -q '"tool_use"' "$tmp/e.txt" && [ ! -s "$tmp/o.txt" ]; then ok "an unknown --name of a chat_template.jinja folder exits 2"
else bad "--name with chat_template.jinja rc $rc: $(cat "$tmp/o.txt" "$tmp/e.txt")"; fi
"$CALDRIX" template "$tmp/jinja" --messages "$tmp/m.json" --name default > "$tmp/o.txt" 2> "$tmp/e.txt"; rc=$?
if [ $rc -eq 0 ] && [ "$(cat "$tmp/o.txt")" = "J1" ]; then ok "--name default is the folder's one template"; else bad "--name default rc $rc"; fi
"$CALDRIX" template models/stories260K.gguf --messages "$tmp/m.json" --name tool_use > "$tmp/o.txt" 2> "$tmp/e.txt"; rc=$?
if [ $rc -eq 2 ] && grep -q 'tokenizer.chat_template.tool_use' "$tmp/e.txt"; then ok "an unknown --name of a GGUF exits 2 naming the key"
else bad "--name with a GGUF rc $rc: $(cat "$tmp/e.txt")"; fi
"$CALDRIX" template --template "$tmp/t.jinja" --messages "$tmp/m.json" --name tool_use > "$tmp/o.txt" 2> "$tmp/e.txt"; rc=$?
if [ $rc -eq 2 ] && grep -q -- '--name' "$tmp/e.txt" && [ ! -s "$tmp/o.txt" ]; then ok "--name with --template (one template) exits 2"
else bad "--name with --template rc $rc"; fi
"$CALDRIX" template "$tmp/named" --template "$tmp/t.jinja" --messages "$tmp/m.json" --name tool_use > /dev/null 2>&1; rc=$?
if [ $rc -eq 2 ]; then ok "--name with a model and --template exits 2"; else bad "--name with model and --template rc $rc"; fi
"$CALDRIX" template --help > "$tmp/h.txt"; rc=$?
if [ $rc -eq 0 ] && grep -q -- "--no-generation-prompt" "$tmp/h.txt"; then ok "--help"; else bad "--help rc $rc"; fi

echo "template_cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
