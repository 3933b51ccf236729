#!/usr/bin/env bash
# caldrix tokenize, as shared/design/INTERFACES.md specifies it. Goldens from the fixtures only.
set -u
C=${CALDRIX:-build/caldrix}
T=../shared/fixtures/tokenizers
V=../shared/models/llamacpp-vocab
pass=0; fail=0
ok() { if [ "$1" = "$2" ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL $3: got [$1] want [$2]"; fi; }

# golden line: llama3 "Hello, world!" with add_special_tokens true / false
ok "$($C tokenize $T/llama3 --json 'Hello, world!')" "[128000,9906,11,1917,0]" "llama3 --json"
ok "$($C tokenize $T/llama3 --no-special 'Hello, world!')" "9906 11 1917 0" "llama3 --no-special"
ok "$($C tokenize $T/llama3/tokenizer.json --json 'Hello, world!')" "[128000,9906,11,1917,0]" "a tokenizer.json file as MODEL"
# --no-parse-special: the special token's text is plain text (not id 151644)
a=$($C tokenize $T/qwen3 --json '<|im_start|>'); ok "$a" "[151644]" "qwen3 parses specials"
b=$($C tokenize $T/qwen3 --json --no-parse-special '<|im_start|>'); [ "$b" != "[151644]" ] && [ "${b#[}" != "$b" ] && pass=$((pass+1)) || { fail=$((fail+1)); echo "FAIL no-parse-special: $b"; }
# a GGUF vocabulary: llama.cpp vector 0 of llama-spm ("ied 4 ½ months")
want=$(head -1 $V/ggml-vocab-llama-spm.gguf.out | sed 's/^ //')
ok "$($C tokenize $V/ggml-vocab-llama-spm.gguf --no-special --no-parse-special 'ied 4 ½ months')" "$want" "llama-spm gguf"
# --jsonl: the first golden lines of mistral, ids and decoded exactly
head -6 $T/mistral/golden.jsonl > /tmp/cdx_tok_gold.$$
python3 -c '
import json,sys
for l in open(sys.argv[1]):
    o=json.loads(l); print(json.dumps({"text":o["text"],"add_special_tokens":o["add_special_tokens"]}))' /tmp/cdx_tok_gold.$$ |
    $C tokenize $T/mistral --jsonl > /tmp/cdx_tok_out.$$
r=$(python3 -c '
import json,sys
g=[json.loads(l) for l in open(sys.argv[1])]; o=[json.loads(l) for l in open(sys.argv[2])]
print(sum(1 for a,b in zip(g,o) if a["ids"]==b["ids"] and a["decoded"]==b["decoded"]), len(g), len(o))' /tmp/cdx_tok_gold.$$ /tmp/cdx_tok_out.$$)
ok "$r" "6 6 6" "mistral --jsonl"
# parse_special false in --jsonl
ok "$(echo '{"text":"<s>","add_special_tokens":false,"parse_special":false}' | $C tokenize $T/mistral --jsonl | python3 -c 'import json,sys; print(1 in json.load(sys.stdin)["ids"])')" "False" "jsonl parse_special false"
rm -f /tmp/cdx_tok_gold.$$ /tmp/cdx_tok_out.$$
# errors: invalid UTF-8 text (exit 1, message names the offset), bad model path, usage
$C tokenize $T/qwen3 $'ab\xff' >/dev/null 2>/tmp/cdx_tok_err.$$; rc=$?
ok "$rc $(grep -c 'offset 2' /tmp/cdx_tok_err.$$)" "1 1" "invalid UTF-8 exit 1 naming the offset"
$C tokenize /nonexistent 'x' >/dev/null 2>/tmp/cdx_tok_err.$$; ok "$? $(grep -c nonexistent /tmp/cdx_tok_err.$$)" "1 1" "missing model"
$C tokenize >/dev/null 2>&1; ok "$?" "2" "usage error"
$C tokenize --help >/dev/null; ok "$?" "0" "--help"
echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}}' > /tmp/cdx_tok_bad.$$.json
$C tokenize /tmp/cdx_tok_bad.$$.json 'a' >/dev/null 2>/tmp/cdx_tok_err.$$; ok "$? $(grep -c 'merges\[0\]' /tmp/cdx_tok_err.$$)" "1 1" "malformed tokenizer.json"
echo 'not json' | $C tokenize $T/qwen3 --jsonl >/tmp/cdx_tok_out.$$ 2>/dev/null; ok "$? $(grep -c error /tmp/cdx_tok_out.$$)" "1 1" "bad jsonl line"
rm -f /tmp/cdx_tok_err.$$ /tmp/cdx_tok_bad.$$.json /tmp/cdx_tok_out.$$
# --file: a whole file, reporting tokens and MB/s
printf 'Hello, world!' > /tmp/cdx_tok_file.$$
ok "$($C tokenize $T/llama3 --file /tmp/cdx_tok_file.$$ --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')" "5" "--file token count"
rm -f /tmp/cdx_tok_file.$$
echo "text/tokenize_cli: $pass passed, $fail failed"
