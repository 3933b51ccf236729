#!/usr/bin/env bash
# The hub commands without a network: inspect on every fixture and on malformed files, models,
# doctor, --help and usage errors.
set -u
cd "$(dirname "$0")/../.."
CALDRIX=${CALDRIX:-$PWD/build/caldrix}
SH=../shared
passed=0; failed=0
ok()  { passed=$((passed+1)); echo "ok - $1"; }
bad() { failed=$((failed+1)); echo "not ok - $1"; [ -n "${2:-}" ] && echo "    $2"; }
check() { if eval "$2"; then ok "$1"; else bad "$1" "failed: $2"; fi; } # check NAME 'CONDITION'
T=$(mktemp -d /tmp/caldrix-hub-cli.XXXXXX)
trap 'rm -rf "$T"' EXIT
unset HF_HUB_CACHE HF_TOKEN HF_ENDPOINT CALDRIX_OLLAMA_REGISTRY
export HF_HOME="$T/hf" CALDRIX_CACHE="$T/cx" HF_HUB_OFFLINE=1 CALDRIX_OFFLINE=1

# A fixture of a family caldrix does not run yet (tests/hub/families_not_yet.txt) is refused with
# the report; every other one must be accepted.
not_yet=" $(grep -v '^#' tests/hub/families_not_yet.txt | tr '\n' ' ')"
for d in $SH/fixtures/hf/*/; do
    n=$(basename $d)
    "$CALDRIX" inspect "$d" --json > "$T/$n.json" 2> "$T/$n.err"; rc=$?
    # the layer count the checkpoint's own config.json gives (a VLM keeps it in text_config)
    layers=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(c.get('num_hidden_layers') or c['text_config']['num_hidden_layers'])" "$d/config.json")
    if [[ "$not_yet" == *" $n "* ]]; then
        check "inspect $n (safetensors): the report, exit 1 with the reason" '[ $rc -eq 1 ] && grep -q "cannot run this model" "$T/$n.err" && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r[\"layers\"]==$layers and (r[\"refusal\"] or r[\"missing_required_tensors\"].startswith(\"n/a\"))" "$T/$n.json"'
    else
        check "inspect $n (safetensors) gives the report" '[ $rc -eq 0 ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r[\"missing_required_tensors\"]==\"none\" and r[\"layers\"]==$layers and r[\"estimated_memory\"][\"total_bytes\"]>0" "$T/$n.json"'
    fi
done
for f in $SH/fixtures/hf-gguf/*.gguf $SH/models/stories260K/stories260K.gguf; do
    n=$(basename $f .gguf)
    "$CALDRIX" inspect "$f" > "$T/$n.txt" 2>&1; rc=$?
    check "inspect $n (gguf) gives the report" '[ $rc -eq 0 ] && grep -q "^gguf path=.* tensors=[0-9]* metadata=[0-9]*" "$T/$n.txt" && grep -q "missing_required_tensors=none" "$T/$n.txt" && grep -q "unsupported_tensor_types=none" "$T/$n.txt"'
done
head -c 5000 $SH/fixtures/hf-gguf/qwen3.gguf > "$T/cut.gguf"
printf 'GGUF\x03\x00\x00\x00' > "$T/tiny.gguf"
echo "hello" > "$T/text.gguf"
for f in cut tiny text; do
    "$CALDRIX" inspect "$T/$f.gguf" > "$T/$f.out" 2> "$T/$f.err"; rc=$?
    check "inspect of a malformed $f.gguf: exit 1 and a message naming the file" '[ $rc -eq 1 ] && grep -q "$T/$f.gguf" "$T/$f.err" && ! grep -qi "sanitizer" "$T/$f.err"'
done
mkdir -p "$T/noconf"; cp $SH/fixtures/hf/llama/model.safetensors "$T/noconf/"
"$CALDRIX" inspect "$T/noconf" > /dev/null 2> "$T/noconf.err"; rc=$?
check "inspect of a folder without config.json: a clear error" '[ $rc -eq 1 ] && grep -q "config.json" "$T/noconf.err"'
"$CALDRIX" inspect qwen3-0.6b > /dev/null 2> "$T/alias.err"; rc=$?
check "inspect of an alias not in the cache says so, without a request" '[ $rc -eq 1 ] && grep -q "run caldrix pull qwen3-0.6b" "$T/alias.err"'

"$CALDRIX" models supported > "$T/sup.txt"; rc=$?
check "models supported lists the 8 aliases with repo and revision" '[ $rc -eq 0 ] && [ $(grep -cE "^[a-z0-9.-]+ +[A-Za-z0-9-]+/[A-Za-z0-9.-]+ +[0-9a-f]{40}$" "$T/sup.txt") -eq 8 ] && grep -q "qwen3-30b-a3b *Qwen/Qwen3-30B-A3B *ad44e777bcd18fa416d9da3bd8f70d33ebb85d39" "$T/sup.txt"'
"$CALDRIX" models supported --all --json > "$T/sup.json"; rc=$?
# the config.json architectures caldrix reads: one line each in CDX_HF_ARCHS (caldrix/config.h)
NARCH=$(sed -n '/define CDX_HF_ARCHS/,/a new architecture/p' include/caldrix/config.h | grep -c '^    X(')
check "models supported --all --json lists the $NARCH architectures of the table" '[ $rc -eq 0 ] && [ "$NARCH" -gt 18 ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert len(r[\"aliases\"])==8 and len(r[\"architectures\"])==int(sys.argv[2])" "$T/sup.json" "$NARCH"'
"$CALDRIX" models rules --json > "$T/rules.json"; rc=$?
check "models rules --json" '[ $rc -eq 0 ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r[0][\"id\"]==\"architecture\"" "$T/rules.json"'
"$CALDRIX" models search qwen3 > "$T/search.txt"; rc=$?
check "models search matches aliases" '[ $rc -eq 0 ] && grep -q "^qwen3-8b " "$T/search.txt" && grep -q "qwen3-30b-a3b" "$T/search.txt" && ! grep -q smollm2 "$T/search.txt"'
"$CALDRIX" models info smollm2 > "$T/info.txt"; rc=$?
check "models info of an alias not downloaded" '[ $rc -eq 0 ] && grep -q "pinned at 93efa2f097d58c2a74874c7e644dbc9b0cee75a2" "$T/info.txt" && grep -q "not in the cache" "$T/info.txt"'
"$CALDRIX" models frobnicate 2> /dev/null; rc=$?
check "models with an unknown subcommand: usage error" '[ $rc -eq 2 ]'

"$CALDRIX" doctor > "$T/doctor.txt"; rc=$?
check "doctor prints CPU features, lanes, caches, memory" '[ $rc -eq 0 ] && grep -q "AVX2" "$T/doctor.txt" && grep -q "AVX-512VNNI" "$T/doctor.txt" && grep -q "^lanes:" "$T/doctor.txt" && grep -q "hugging face: $T/hf/hub" "$T/doctor.txt" && grep -q "^memory: .* available of " "$T/doctor.txt" && grep -q "offline: CALDRIX_OFFLINE" "$T/doctor.txt"'
"$CALDRIX" models supported --all --json > "$T/sup.json"
check "doctor lists what caldrix runs from the architecture table: every config.json architecture, the GGUF ones" \
    '( for a in $(python3 -c "import json,sys; print(\" \".join(r[\"architecture\"] for r in json.load(open(sys.argv[1]))[\"architectures\"]))" "$T/sup.json"); do grep -q "^  config.json architectures:.* $a\(,\|$\)" "$T/doctor.txt" || exit 1; done ) && grep -q "^  GGUF architectures: llama, qwen2, qwen3, qwen3moe, qwen2moe, llama with experts (Mixtral), qwen35, granite, smollm3, olmo2, olmoe, granitemoe, gemma, gemma2, gemma3\(, \|$\)" "$T/doctor.txt" && for g in $(sed -n "s/^ *\.gguf_name = \"\([a-z0-9-]*\)\".*/\1/p" src/model/arch/*.c); do grep "^  GGUF architectures:" "$T/doctor.txt" | grep -q " $g\(,\|$\)" || exit 1; done'

# the architectures refused by name (src/model/arch.c): a GGUF bitnet file and the list with reasons
python3 -c "
import struct
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
open('$T/goss.gguf', 'wb').write(b'GGUF' + struct.pack('<IQQ', 3, 0, 1) + s('general.architecture') + struct.pack('<I', 8) + s('rwkv6'))"
"$CALDRIX" inspect "$T/goss.gguf" > /dev/null 2> "$T/goss.err"; rc=$?
check "inspect of a GGUF file of an architecture caldrix does not map (rwkv6): refused naming it and the ones it runs" '[ $rc -eq 1 ] && grep -q "general.architecture is \"rwkv6\"; caldrix runs llama, .*bitnet, qwen2vl GGUF files" "$T/goss.err"'
"$CALDRIX" models supported --all > "$T/sup.txt"
check "models supported --all lists the refused architectures with their reasons" \
    'python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r={x[\"architecture\"] for x in d[\"refused\"]}; assert {\"BitnetForCausalLM\",\"Gemma3ForConditionalGeneration\"} <= r and not {\"BitNetForCausalLM\",\"Qwen2VLForConditionalGeneration\"} & r and all(len(x[\"reason\"]) > 20 for x in d[\"refused\"]); a={x[\"architecture\"]: x for x in d[\"architectures\"]}; assert \"vision tower is not computed\" in a[\"Qwen2VLForConditionalGeneration\"][\"note\"]" "$T/sup.json" && grep -q "^REFUSED BY NAME" "$T/sup.txt" && grep -q "^BitnetForCausalLM  *-  *bitnet  *1bitLLM.s remote-code BitNet b1.58" "$T/sup.txt" && grep -q "^BitNetForCausalLM  *bitnet " "$T/sup.txt"'

for c in pull inspect models doctor; do
    "$CALDRIX" $c --help > "$T/h.txt" 2>&1; rc=$?
    check "$c --help" '[ $rc -eq 0 ] && grep -q "usage: caldrix $c" "$T/h.txt"'
done
"$CALDRIX" pull > /dev/null 2>&1; rc=$?
check "pull without REF: usage error" '[ $rc -eq 2 ]'
"$CALDRIX" pull a b > /dev/null 2>&1; rc=$?
check "pull with two REFs: usage error" '[ $rc -eq 2 ]'
"$CALDRIX" pull x/y --ctx 0 > /dev/null 2> "$T/ctx.err"; rc=$?
check "pull --ctx 0: usage error naming the value" '[ $rc -eq 2 ] && grep -q "\"0\"" "$T/ctx.err"'
"$CALDRIX" pull "bad ref!" > /dev/null 2> "$T/badref.err"; rc=$?
check "pull of a malformed reference: exit 1, naming the forms" '[ $rc -eq 1 ] && grep -q "not an alias" "$T/badref.err"'
"$CALDRIX" pull $SH/fixtures/hf/llama > "$T/local.out" 2>&1; rc=$?
check "pull of a local folder prints it, downloading nothing" '[ $rc -eq 0 ] && [ "$(cat $T/local.out)" = "$SH/fixtures/hf/llama" ]'

CALDRIX_MEM_AVAILABLE=lots "$CALDRIX" doctor > "$T/doc.out" 2> "$T/doc.err"; rc=$?
check "a malformed CALDRIX_MEM_AVAILABLE is refused by name (doctor exits 2)" '[ $rc -eq 2 ] && grep -q "CALDRIX_MEM_AVAILABLE is \"lots\"" "$T/doc.err"'
CALDRIX_MEM_AVAILABLE=3G "$CALDRIX" doctor > "$T/doc.out" 2> "$T/doc.err"; rc=$?
check "a well-formed CALDRIX_MEM_AVAILABLE is what admission uses" '[ $rc -eq 0 ] && grep -q "admission uses 3.00 GiB (CALDRIX_MEM_AVAILABLE)" "$T/doc.out"'

# inspect and the weight budget (issue 15): the least budget, the memory it fits, a budget below the least
Q3M=$SH/fixtures/hf/qwen3_moe
"$CALDRIX" inspect $Q3M > "$T/i1.out" 2>&1; rc=$?
check "inspect of a mixture of experts reports its experts and the least --weight-budget" '[ $rc -eq 0 ] && grep -q "weight_budget: dense .* + experts .*; the least --weight-budget is 662016" "$T/i1.out"'
"$CALDRIX" run $Q3M --prompt-ids 1,2 -n 1 --weight-budget 1 > /dev/null 2> "$T/r1.err"; rc=$?
check "run refuses a budget below the least with the number inspect gives" '[ $rc -ne 0 ] && grep -q "one token needs: .*(662016 bytes" "$T/r1.err"'
CALDRIX_MEM_AVAILABLE=1.2M "$CALDRIX" inspect $Q3M --json > "$T/i2.out" 2>&1; rc=$?
b=$(python3 -c "import json,sys; m=json.load(open('$T/i2.out'))['memory'] or ''; print(m.split('--weight-budget ')[1].split()[0] if '--weight-budget ' in m else '')" 2>/dev/null)
check "inspect: too big for the memory available whole, it proposes a budget that fits" '[ $rc -eq 0 ] && [ -n "$b" ] && [ "$b" -ge 662016 ]'
"$CALDRIX" run $Q3M --prompt-ids 1,2,3 -n 4 --temp 0 --json > "$T/r2.out" 2>/dev/null
"$CALDRIX" run $Q3M --prompt-ids 1,2,3 -n 4 --temp 0 --json --weight-budget "${b:-1}" > "$T/r3.out" 2>/dev/null; rc=$?
check "run under that budget gives the resident run's tokens" '[ $rc -eq 0 ] && [ "$(python3 -c "import json; print(json.load(open(\"$T/r2.out\"))[\"tokens\"])")" = "$(python3 -c "import json; print(json.load(open(\"$T/r3.out\"))[\"tokens\"])")" ]'
CALDRIX_MEM_AVAILABLE=1M "$CALDRIX" inspect $Q3M > "$T/i3.out" 2>&1
check "inspect: below even the least budget, it says so" 'grep -q "not even at the least weight budget" "$T/i3.out"'
"$CALDRIX" inspect $Q3M --weight-budget 100K > /dev/null 2> "$T/i4.err"; rc=$?
check "inspect --weight-budget below the least exits 1 with both numbers" '[ $rc -eq 1 ] && grep -q "(102400 bytes) is below what one token needs: .*(662016 bytes)" "$T/i4.err"'
"$CALDRIX" run $Q3M --prompt-ids 1 -n 1 --weight-budget 8X > /dev/null 2> "$T/r4.err"; rc=$?
check "a malformed --weight-budget is a usage error naming it" '[ $rc -eq 2 ] && grep -q "\"8X\" is not a byte count" "$T/r4.err"'

echo "hub_cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
