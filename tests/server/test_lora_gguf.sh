#!/usr/bin/env bash
# llama.cpp GGUF LoRA adapters (issue 42 item 1): the shared train fixtures' final PEFT adapters
# (llama q/v r 4; qwen3 all seven modules r 8) written as GGUF adapters the way llama.cpp's
# convert_lora_to_gguf.py writes them (tests/cli/lora_to_gguf.py; its output is pinned by sha256 in
# tests/golden/lora-gguf-llamacpp.json, where llama.cpp ran it: scripts/goldens/llamacpp-lora-gguf.mjs):
#   - on the base converted to GGUF: `caldrix run --lora FILE.gguf` gives llama.cpp's 16 greedy tokens;
#   - on the safetensors base (q/k rows of the adapter permuted back): PyTorch's golden_adapter.json;
#   - `caldrix serve BASE.gguf --lora NAME=FILE.gguf`: a request choosing it gets the same tokens, one
#     with scale 0 the base's, both in one batch;
#   - an adapter of another architecture is refused naming both (exit 1).
set -u
cd "$(dirname "$0")/../.."
source tests/server/serve_lib.sh
TR=../shared/fixtures/train; HF=../shared/fixtures/hf; G=tests/golden/lora-gguf-llamacpp.json
[ -f $TR/README.md ] || { echo "0 passed, 0 failed (no fixtures)"; exit 0; }
toks() { python3 -c "import json,sys; print(','.join(map(str,json.load(open(sys.argv[1]))['tokens'])))" "$1"; }
# gold K FIELD: adapter entry K of $G, FIELD a python expression of it (a: the entry)
gold() { python3 -c "import json,sys; a=json.load(open('$G'))['adapters'][int(sys.argv[1])]; print($2)" "$1"; }
pyt() { python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['cases'][int(sys.argv[2])]; print(','.join(str(s['token']) for s in c['steps']))" "$1" "$2"; }

for k in 0 1; do
    base=$(gold $k "a['base']"); ad=$(gold $k "a['adapter']"); fix=${ad%%/*}
    "$CALDRIX" convert $HF/$base "$tmp/$base.gguf" --type F32 >/dev/null 2>&1
    python3 tests/cli/lora_to_gguf.py $HF/$base $TR/$ad "$tmp/$fix.gguf"
    check "$fix: the base GGUF and the GGUF adapter are the files llama.cpp ran (sha256 pins)" \
        [ "$(sha256sum "$tmp/$base.gguf" | cut -c1-64) $(sha256sum "$tmp/$fix.gguf" | cut -c1-64)" = "$(gold $k "a['base_sha256'] + ' ' + a['adapter_sha256']")" ]
    n=$(gold $k "len(a['cases'])"); same=0; same_pt=0
    for c in $(seq 0 $((n-1))); do
        ids=$(gold $k "','.join(map(str, a['cases'][$c]['prompt_ids']))")
        "$CALDRIX" run "$tmp/$base.gguf" --prompt-ids "$ids" -n 16 --temp 0 --threads 1 --json --lora "$tmp/$fix.gguf" >"$tmp/o.json" 2>"$tmp/e"
        [ "$(toks "$tmp/o.json")" = "$(gold $k "','.join(map(str, a['cases'][$c]['tokens']))")" ] && same=$((same+1))
        "$CALDRIX" run $HF/$base --prompt-ids "$ids" -n 16 --temp 0 --threads 1 --json --lora "$tmp/$fix.gguf" >"$tmp/o.json" 2>"$tmp/e"
        [ "$(toks "$tmp/o.json")" = "$(pyt $TR/$fix/golden_adapter.json $c)" ] && same_pt=$((same_pt+1))
    done
    check "$fix: run BASE.gguf --lora FILE.gguf gives llama.cpp's tokens on $same/$n cases" [ $same -eq $n ]
    check "$fix: run on the safetensors base with the GGUF adapter gives PyTorch's tokens on $same_pt/$n cases" [ $same_pt -eq $n ]
done
"$CALDRIX" run $HF/qwen3 --prompt-ids 1,2,3 -n 2 --lora "$tmp/lora_llama.gguf" >"$tmp/o" 2>"$tmp/e"; rc=$?
check "a llama GGUF adapter on qwen3: refused naming both architectures (exit 1)" \
    [ $rc -eq 1 -a -n "$(grep -o 'general.architecture is "llama"; the model is "qwen3"' "$tmp/e")" ]

# serve: the qwen3 adapter (all seven modules) chosen per request, beside a request at scale 0
start_server q "$tmp/qwen3.gguf" --threads 2 --max-batch 4 --lora all=$tmp/lora_qwen3_all.gguf \
    || { bad "serve with a GGUF adapter starts"; echo "$pass passed, $fail failed"; exit 1; }
ids=$(gold 1 "','.join(map(str, a['cases'][0]['prompt_ids']))")
"$CALDRIX" run "$tmp/qwen3.gguf" --prompt-ids "$ids" -n 16 --temp 0 --threads 1 --json >"$tmp/base.json" 2>/dev/null
post /v1/completions "{\"prompt\":[$ids],\"max_tokens\":16,\"temperature\":0,\"return_tokens\":true,\"lora\":[{\"id\":\"all\",\"scale\":1}]}" "$tmp/s1.json" >"$tmp/c1" & p1=$!
post /v1/completions "{\"prompt\":[$ids],\"max_tokens\":16,\"temperature\":0,\"return_tokens\":true,\"lora\":[{\"id\":0,\"scale\":0}]}" "$tmp/s0.json" >"$tmp/c0" & p0=$!
wait $p1 $p0
check "serve --lora all=FILE.gguf: a request with it gets llama.cpp's tokens" \
    [ "$(cat "$tmp/c1")" = 200 -a "$(jv "$tmp/s1.json" "d['choices'][0]['tokens']")" = "$(gold 1 "a['cases'][0]['tokens']")" ]
check "... and one at scale 0, beside it, the base model's" \
    [ "$(cat "$tmp/c0")" = 200 -a "$(jv "$tmp/s0.json" "d['choices'][0]['tokens']")" = "$(jv "$tmp/base.json" "d['tokens']")" ]
check "... which differ (so the check can fail)" [ "$(toks "$tmp/base.json")" != "$(gold 1 "','.join(map(str, a['cases'][0]['tokens']))")" ]
[ "$fail" -eq 0 ] || { cat "$tmp/c1" "$tmp/s1.json" "$tmp/c0" "$tmp/s0.json"; tail -5 "$tmp/q.log"; }
stop_servers
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
