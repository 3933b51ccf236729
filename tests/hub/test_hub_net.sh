#!/usr/bin/env bash
# caldrix pull / inspect / models against a fake Hugging Face Hub and a fake Ollama registry
# (tests/hub/fake_hub.js) on 127.0.0.1, on a free port, for at most a few minutes.
# The request log the fake server writes proves what was (and was not) downloaded.
set -u
cd "$(dirname "$0")/../.."
CALDRIX=${CALDRIX:-$PWD/build/caldrix}
SH=../shared
passed=0; failed=0
ok()   { passed=$((passed+1)); echo "ok - $1"; }
bad()  { failed=$((failed+1)); echo "not ok - $1"; [ -n "${2:-}" ] && echo "    $2"; }
check() { if eval "$2"; then ok "$1"; else bad "$1" "failed: $2"; fi; } # check NAME 'CONDITION' 
has()  { grep -qF -- "$2" "$1"; }
hasnt() { ! grep -qF -- "$2" "$1"; }

T=$(mktemp -d /tmp/caldrix-hub-net.XXXXXX)
SERVER_PID=
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
[ -n "${KEEP_T:-}" ] && trap "kill \$SERVER_PID" EXIT

if ! command -v node >/dev/null; then echo "node is needed for the fake servers"; echo "hub_net: 0 passed, 1 failed"; exit 1; fi

# ---- repos served by the fake Hub ----
C1=1111111111111111111111111111111111111111
C2=2222222222222222222222222222222222222222
mkrepo() { # owner/name commit [json extras]
    local d="$T/srv/hf/$1"; mkdir -p "$d/files"
    echo "{\"commit\": \"$2\"${3:+, $3}}" > "$d/repo.json"
    echo "$d/files"
}
F=$(mkrepo acme/tiny $C1 '"refs": {"main": "'$C1'", "v1": "'$C1'"}, "lfs": ["model.safetensors", "consolidated.safetensors"]')
cp $SH/fixtures/hf/qwen3/config.json $SH/fixtures/hf/qwen3/model.safetensors $SH/fixtures/hf/qwen3/generation_config.json "$F/"
cp $SH/fixtures/tokenizers/mistral/tokenizer.json $SH/fixtures/tokenizers/qwen3/tokenizer_config.json "$F/"
cp $SH/fixtures/tokenizers/mistral/tokenizer.model "$F/"          # present, but tokenizer.json wins
cp $SH/fixtures/hf/qwen3/model.safetensors "$F/consolidated.safetensors"
echo "# tiny" > "$F/README.md"; echo "not read" > "$F/pytorch_model.bin"
mkdir -p "$F/onnx"; echo x > "$F/onnx/model.onnx"

F=$(mkrepo acme/gpt2ish $C1 '"lfs": ["model.safetensors"]')
echo '{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 2}' > "$F/config.json"
cp $SH/fixtures/tokenizers/mistral/tokenizer.json $SH/fixtures/hf/qwen3/model.safetensors "$F/"

F=$(mkrepo acme/gated $C1 '"gated": true, "lfs": ["model.safetensors"]')
cp $SH/fixtures/hf/llama/config.json $SH/fixtures/hf/llama/model.safetensors $SH/fixtures/tokenizers/mistral/tokenizer.json "$F/"

F=$(mkrepo acme/cut $C2 '"lfs": ["model.safetensors"], "cut": {"model.safetensors": 300000}')
cp $SH/fixtures/hf/qwen2/config.json $SH/fixtures/hf/qwen2/model.safetensors $SH/fixtures/tokenizers/mistral/tokenizer.json "$F/"

F=$(mkrepo acme/sp $C1 '"lfs": ["model.safetensors", "tokenizer.model"]')
cp $SH/fixtures/hf/llama_bf16/config.json $SH/fixtures/hf/llama_bf16/model.safetensors "$F/"
cp $SH/fixtures/tokenizers/mistral/tokenizer.model "$F/"
echo '{"tokenizer_class": "LlamaTokenizer", "add_bos_token": true}' > "$F/tokenizer_config.json"
echo '{"<extra>": 32768}' > "$F/added_tokens.json"

F=$(mkrepo acme/pair $C1 '"lfs": ["model.safetensors"]')
cp $SH/fixtures/hf/qwen2/config.json $SH/fixtures/hf/qwen2/model.safetensors "$F/"
echo '{"a": 0, "b": 1, "ab": 2}' > "$F/vocab.json"; printf '#version: 0.2\na b\n' > "$F/merges.txt"
echo '{"tokenizer_class": "Qwen2TokenizerFast"}' > "$F/tokenizer_config.json"

F=$(mkrepo acme/unigram $C1 '"lfs": ["model.safetensors"]')
cp $SH/fixtures/hf/llama/config.json $SH/fixtures/hf/llama/model.safetensors "$F/"
# a SentencePiece ModelProto: pieces {piece: "a", score: 0}, trainer_spec {model_type: UNIGRAM}
printf '\x0a\x08\x0a\x01\x61\x15\x00\x00\x00\x00\x12\x02\x18\x01' > "$F/tokenizer.model"

F=$(mkrepo acme/sharded $C1 '"lfs": ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model-old.safetensors"]')
cp $SH/fixtures/hf/llama3_rope/* "$F/"; rm -f "$F/golden.json"
cp $SH/fixtures/hf/llama/model.safetensors "$F/model-old.safetensors"
cp $SH/fixtures/tokenizers/mistral/tokenizer.json "$F/"

F=$(mkrepo acme/quant $C1)
sed 's/"torch_dtype"/"quantization_config": {"quant_method": "gptq", "bits": 4}, "torch_dtype"/' \
    $SH/fixtures/hf/llama/config.json > "$F/config.json"
cp $SH/fixtures/hf/llama/model.safetensors $SH/fixtures/tokenizers/mistral/tokenizer.json "$F/"

F=$(mkrepo acme/big $C1 '"lfs": ["model.safetensors"]')
cp $SH/fixtures/hf/qwen3/config.json $SH/fixtures/hf/qwen3/model.safetensors $SH/fixtures/tokenizers/mistral/tokenizer.json "$F/"

F=$(mkrepo acme/adapter $C1 '"lfs": ["model.safetensors", "adapter_model.safetensors"]')
cp $SH/fixtures/hf/qwen3/config.json $SH/fixtures/hf/qwen3/model.safetensors $SH/fixtures/tokenizers/mistral/tokenizer.json "$F/"
echo '{"base_model_name_or_path": "acme/tiny", "peft_type": "LORA", "r": 8}' > "$F/adapter_config.json"
cp $SH/fixtures/hf/qwen2/model.safetensors "$F/adapter_model.safetensors"

F=$(mkrepo acme/tuned $C1 '"lfs": ["model.safetensors", "adapter_model.safetensors"]')
cp $SH/fixtures/hf/qwen3/config.json $SH/fixtures/tokenizers/mistral/tokenizer.json "$F/"
cp $SH/fixtures/hf/llama/model.safetensors "$F/model.safetensors"   # different weights from the base
echo '{"base_model_name_or_path": "acme/tiny", "peft_type": "LORA"}' > "$F/adapter_config.json"
cp $SH/fixtures/hf/qwen2/model.safetensors "$F/adapter_model.safetensors"

F=$(mkrepo acme/notok $C1)
cp $SH/fixtures/hf/llama/config.json $SH/fixtures/hf/llama/model.safetensors "$F/"

F=$(mkrepo acme/ggufonly $C1)
cp $SH/fixtures/hf/llama/config.json $SH/fixtures/tokenizers/mistral/tokenizer.json "$F/"
cp $SH/fixtures/hf-gguf/llama.gguf "$F/model.gguf"

mkdir -p "$T/srv/hf/acme/oldname"; echo '{"commit": "'$C1'", "renamed_to": "acme/tiny"}' > "$T/srv/hf/acme/oldname/repo.json"

# ---- Ollama models ----
O="$T/srv/ollama"
mkdir -p "$O/library/tiny/q8" "$O/library/tiny/bad" "$O/library/tiny/cut" "$O/someone/tiny/latest"
cp $SH/fixtures/hf-gguf/qwen3.gguf "$O/library/tiny/q8/model"
echo '{{ .Prompt }}' > "$O/library/tiny/q8/template"; echo '{"stop": ["<|im_end|>"]}' > "$O/library/tiny/q8/params"
cp $SH/fixtures/hf-gguf/llama.gguf "$O/library/tiny/bad/model"; touch "$O/library/tiny/bad/bad_digest"
cp $SH/fixtures/hf-gguf/qwen2.gguf "$O/library/tiny/cut/model"; echo 200000 > "$O/library/tiny/cut/cut"
cp $SH/fixtures/hf-gguf/llama.gguf "$O/someone/tiny/latest/model"

# ---- start the servers ----
LOG="$T/requests.log"; : > "$LOG"
node tests/hub/fake_hub.js "$T/srv" "$T/port" "$LOG" 240 &
SERVER_PID=$!
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.1; done
PORT=$(cat "$T/port" 2>/dev/null)
if [ -z "$PORT" ]; then echo "fake server did not start"; echo "hub_net: 0 passed, 1 failed"; exit 1; fi

unset HF_TOKEN HF_TOKEN_PATH HF_HUB_CACHE HUGGINGFACE_HUB_CACHE HF_HUB_OFFLINE CALDRIX_OFFLINE XDG_CACHE_HOME CALDRIX_MEM_AVAILABLE
export HF_HOME="$T/hfhome" CALDRIX_CACHE="$T/cx"
export HF_ENDPOINT="http://127.0.0.1:$PORT" CALDRIX_OLLAMA_REGISTRY="http://127.0.0.1:$PORT/"
CACHE="$HF_HOME/hub"
run() { # run NAME ARGS... : stdout in $T/NAME.out, stderr in $T/NAME.err, status in $rc
    local n=$1; shift
    : > "$LOG.mark"; cp "$LOG" "$LOG.before"
    timeout 60 "$CALDRIX" "$@" > "$T/$n.out" 2> "$T/$n.err"; rc=$?
    tail -n +$(( $(wc -l < "$LOG.before") + 1 )) "$LOG" > "$T/$n.log"
}

# 1. a full pull into the cache layout
run full pull acme/tiny
R="$CACHE/models--acme--tiny"
check "pull acme/tiny exits 0" '[ "$rc" -eq 0 ]'
check "pull prints the snapshot path" '[ "$(cat $T/full.out)" = "$R/snapshots/$C1" ]'
check "refs/main holds the commit" '[ "$(cat $R/refs/main 2>/dev/null)" = "$C1" ]'
SHA=$(sha256sum $SH/fixtures/hf/qwen3/model.safetensors | cut -c1-64)
check "model.safetensors links to ../../blobs/<sha256>" '[ "$(readlink $R/snapshots/$C1/model.safetensors)" = "../../blobs/$SHA" ]'
GITID=$(node -e 'const b=require("fs").readFileSync(process.argv[1]);console.log(require("crypto").createHash("sha1").update(Buffer.concat([Buffer.from("blob "+b.length+"\0"),b])).digest("hex"))' $SH/fixtures/hf/qwen3/config.json)
check "config.json links to its git blob id" '[ "$(readlink $R/snapshots/$C1/config.json)" = "../../blobs/$GITID" ]'
check "the blob holds the bytes" 'cmp -s "$R/blobs/$SHA" $SH/fixtures/hf/qwen3/model.safetensors'
check "tokenizer files and generation_config are there" '[ -e "$R/snapshots/$C1/tokenizer.json" -a -e "$R/snapshots/$C1/tokenizer_config.json" -a -e "$R/snapshots/$C1/generation_config.json" ]'
check "no .incomplete file is left" '[ -z "$(ls $R/blobs | grep incomplete)" ]'
check "the revision was resolved through the API first" 'bash -c "head -1 $T/full.log | grep -q '\''^GET /api/models/acme/tiny/revision/main?blobs=true'\''"'
check "every file is fetched at the commit" 'hasnt "$T/full.log" "/resolve/main/"'
cfg_line=$(grep -n "GET /acme/tiny/resolve/$C1/config.json" $T/full.log | head -1 | cut -d: -f1)
tok_line=$(grep -n "resolve/$C1/tokenizer.json" $T/full.log | head -1 | cut -d: -f1)
w_line=$(grep -n "GET /cdn/acme/tiny/" $T/full.log | head -1 | cut -d: -f1)
check "config.json first, then the tokenizer, then the weights" '[ -n "$cfg_line" -a -n "$tok_line" -a -n "$w_line" ] && [ "$cfg_line" -lt "$tok_line" ] && [ "$tok_line" -lt "$w_line" ]'
check "the weights came through the CDN redirect" 'has "$T/full.log" "GET /cdn/acme/tiny/$SHA"'
check "no other safetensors, .bin, README, tokenizer.model or subfolder file" 'bash -c "! grep -E '\''consolidated|pytorch_model|README|tokenizer.model|onnx'\'' $T/full.log"'
check "the file count and total size are printed first" 'grep -qE '\''^caldrix: 4 files, '\'' "$T/full.err"'
check "a huggingface_hub lock file was taken" '[ -d "$CACHE/.locks/models--acme--tiny" ]'

# the pulled snapshot runs, offline, with the PyTorch golden's tokens (qwen3 fixture, first case)
read -r PIDS GTOK < <(python3 -c 'import json; c=json.load(open("../shared/fixtures/hf/qwen3/golden.json"))["cases"][0]; print(",".join(map(str,c["prompt_ids"])), ",".join(map(str,c["tokens"][:4])))')
HF_HUB_OFFLINE=1 run runhf run acme/tiny --prompt-ids "$PIDS" -n 4 --temp 0 --ignore-eos --json
check "caldrix run acme/tiny works offline and gives the golden tokens" '[ "$rc" -eq 0 ] && [ ! -s "$T/runhf.log" ] && python3 -c "import json,sys; assert json.load(open(sys.argv[1]))[\"tokens\"]==[int(x) for x in sys.argv[2].split(\",\")]" "$T/runhf.out" "$GTOK"'

# on a terminal, a progress bar per file (script(1) gives the command a pseudo-terminal)
HF_HOME="$T/tty" timeout 60 script -qec "$CALDRIX pull acme/tiny" /dev/null > "$T/tty.out" 2>&1
check "on a terminal: a progress bar per download" 'grep -q "model.safetensors *\[#*\] 100%" "$T/tty.out" && grep -q "snapshots/$C1" "$T/tty.out"'

# 2. again: everything kept, nothing downloaded
run again pull acme/tiny
check "second pull exits 0" '[ "$rc" -eq 0 ]'
check "second pull downloads nothing" 'bash -c "! grep -q resolve $T/again.log"'
check "a model complete in the cache prints one line, not the file list" '[ "$(grep -c "acme/tiny is complete in the cache" $T/again.err)" -eq 1 ] && ! grep -q "^  " $T/again.err && hasnt "$T/again.err" "kept" && [ "$(grep -vc "caldrix: reads" $T/again.err)" -eq 1 ]'

# tokenize takes a repo id as run does (resolved through the cache); ids from the fixture's transformers golden
run tok tokenize acme/tiny --no-special --json "Hello world"
want=$(python3 -c "import json; print(json.dumps([j['ids'] for j in map(json.loads, open('$SH/fixtures/tokenizers/mistral/golden.jsonl')) if j['text'] == 'Hello world' and not j['add_special_tokens']][0], separators=(',', ':')))")
check "tokenize owner/name: the cached model's tokenizer, nothing downloaded" '[ "$rc" -eq 0 ] && [ "$(cat $T/tok.out)" = "$want" ] && hasnt "$T/tok.log" "/resolve/"'
run tok2 tokenize acme/nosuch "Hello"
check "tokenize of a repo the Hub lacks: exit 1 naming it" '[ "$rc" -eq 1 ] && has "$T/tok2.err" "acme/nosuch"'
CALDRIX_MEM_AVAILABLE=lots run memb pull acme/big
check "a malformed CALDRIX_MEM_AVAILABLE is refused by name before any weight" '[ "$rc" -eq 1 ] && has "$T/memb.err" "CALDRIX_MEM_AVAILABLE is \"lots\"" && hasnt "$T/memb.log" "model.safetensors"'

HF_ENDPOINT=http://127.0.0.1:1 run down pull acme/tiny
check "the Hub unreachable: the cached commit is used, with a note" '[ "$rc" -eq 0 ] && has "$T/down.err" "unreachable" && [ "$(cat $T/down.out)" = "$R/snapshots/$C1" ]'
HF_ENDPOINT=http://127.0.0.1:1 run down2 pull acme/sp
check "the Hub unreachable and not cached: a network error" '[ "$rc" -eq 1 ] && has "$T/down2.err" "127.0.0.1:1"'

# 3. offline
run off1 pull acme/tiny
HF_HUB_OFFLINE=1 run off1 pull acme/tiny
check "HF_HUB_OFFLINE=1: resolves main through refs/main" '[ "$rc" -eq 0 -a "$(cat $T/off1.out)" = "$R/snapshots/$C1" ]'
check "HF_HUB_OFFLINE=1: no request at all" '[ ! -s "$T/off1.log" ]'
CALDRIX_OFFLINE=yes run off2 pull acme/tiny@$C1
check "CALDRIX_OFFLINE=yes: a commit is looked up as given" '[ "$rc" -eq 0 -a ! -s "$T/off2.log" ]'
HF_HUB_OFFLINE=true run off3 pull acme/sp
check "offline and not cached: refused, naming the variable" '[ "$rc" -eq 1 ] && has "$T/off3.err" "HF_HUB_OFFLINE" && [ ! -s "$T/off3.log" ]'
HF_HUB_OFFLINE=on run off4 pull acme/tiny@v2
check "offline, unknown branch: refused" '[ "$rc" -eq 1 ] && has "$T/off4.err" "v2"'
mv "$R/snapshots/$C1/tokenizer.json" "$T/tok.bak"
HF_HUB_OFFLINE=1 run off5 pull acme/tiny
check "offline, incomplete snapshot: refused as not complete" '[ "$rc" -eq 1 ] && has "$T/off5.err" "not complete"'
mv "$T/tok.bak" "$R/snapshots/$C1/tokenizer.json"
HF_HUB_OFFLINE=0 run off6 pull acme/tiny
check "HF_HUB_OFFLINE=0 is not offline" '[ "$rc" -eq 0 ] && [ -s "$T/off6.log" ]'

# 4. revisions
run rev pull acme/tiny@v1
check "a tag resolves and refs/v1 is written" '[ "$rc" -eq 0 -a "$(cat $R/refs/v1 2>/dev/null)" = "$C1" ]'
run rev2 pull acme/tiny@$C1
check "a commit writes no ref" '[ "$rc" -eq 0 -a ! -e "$R/refs/$C1" ]'
run rev3 pull acme/tiny@nope
check "an unknown revision: clear message" '[ "$rc" -eq 1 ] && has "$T/rev3.err" "no such revision"'
run ren pull acme/oldname
check "a renamed repo: HEAD follows the relative redirect" '[ "$rc" -eq 0 ] && has "$T/ren.log" "HEAD /acme/tiny/resolve/$C1/config.json"'

# 5. refused architecture: config.json alone
run arch pull acme/gpt2ish
check "GPT2LMHeadModel is refused" '[ "$rc" -eq 1 ] && has "$T/arch.err" '\''architectures is ["GPT2LMHeadModel"]'\'''
check "the refusal says nothing else was downloaded" 'has "$T/arch.err" "Nothing else was downloaded"'
check "the server saw the API call and config.json only" '[ "$(grep -v -E "^GET /api/models/acme/gpt2ish/|^(HEAD|GET) /acme/gpt2ish/resolve/$C1/config.json$" $T/arch.log | wc -l)" -eq 0 ] && [ "$(wc -l < $T/arch.log)" -eq 3 ]'
check "no snapshot entry but config.json" '[ "$(ls $CACHE/models--acme--gpt2ish/snapshots/$C1)" = "config.json" ]'
run quant pull acme/quant
check "a quantized checkpoint is refused after config.json" '[ "$rc" -eq 1 ] && has "$T/quant.err" "quantization_config" && has "$T/quant.err" "gptq" && hasnt "$T/quant.log" "model.safetensors"'

# 6. resume after a cut
run cut1 pull acme/cut
CR="$CACHE/models--acme--cut"
SHA2=$(sha256sum $SH/fixtures/hf/qwen2/model.safetensors | cut -c1-64)
check "a download cut mid-file fails" '[ "$rc" -eq 1 ]'
check "the partial file is kept as .incomplete, not promoted" '[ -f "$CR/blobs/$SHA2.incomplete" -a ! -e "$CR/blobs/$SHA2" -a ! -e "$CR/snapshots/$C2/model.safetensors" ]'
check "the partial file holds the bytes sent" '[ "$(stat -c %s $CR/blobs/$SHA2.incomplete 2>/dev/null)" = 300000 ]'
run cut2 pull acme/cut
check "the next pull resumes and completes" '[ "$rc" -eq 0 ] && cmp -s "$CR/blobs/$SHA2" $SH/fixtures/hf/qwen2/model.safetensors'
check "it resumed with a Range request from the cut" 'has "$T/cut2.log" "range=bytes=300000-"'
check "files already there were kept, in the resumed download's list" 'has "$T/cut2.err" "kept tokenizer.json" && has "$T/cut2.err" "model.safetensors"'

# 7. gated
run g1 pull acme/gated
check "gated without a token: 401 and a message about HF_TOKEN" '[ "$rc" -eq 1 ] && has "$T/g1.err" "HF_TOKEN" && has "$T/g1.err" "gated" && has "$T/g1.err" "401"'
HF_TOKEN=hf_wrong run g2 pull acme/gated
check "gated with a wrong token: says the token was refused" '[ "$rc" -eq 1 ] && has "$T/g2.err" "token sent was refused"'
HF_TOKEN=hf_good_token run g3 pull acme/gated
check "gated with HF_TOKEN: downloads" '[ "$rc" -eq 0 ] && has "$T/g3.log" "auth=good"'
check "the token is not sent to the CDN" 'bash -c "! grep -q '\''^GET /cdn/.*auth='\'' $T/g3.log"'
rm -rf "$CACHE/models--acme--gated"; mkdir -p "$HF_HOME"; printf 'hf_good_token\n' > "$HF_HOME/token"
run g4 pull acme/gated
check "gated with \$HF_HOME/token: downloads" '[ "$rc" -eq 0 ]'
rm -f "$HF_HOME/token"
run g5 pull acme/doesnotexist
check "an unknown repo: not found or private" '[ "$rc" -eq 1 ] && has "$T/g5.err" "does not exist"'

# 8. tokenizer fallbacks
run sp pull acme/sp
S="$CACHE/models--acme--sp/snapshots/$C1"
check "SentencePiece tokenizer.model instead of tokenizer.json" '[ "$rc" -eq 0 -a -e "$S/tokenizer.model" -a -e "$S/added_tokens.json" -a -e "$S/tokenizer_config.json" ]'
spm=$(grep -n "tokenizer.model" $T/sp.log | tail -1 | cut -d: -f1); wl=$(grep -n "GET /cdn/acme/sp/.*model.safetensors" $T/sp.log | head -1 | cut -d: -f1)
check "tokenizer.model is fetched before the weights" '[ -n "$spm" -a -n "$wl" ] && [ "$spm" -lt "$wl" ]'
run pair pull acme/pair
check "vocab.json + merges.txt" '[ "$rc" -eq 0 -a -e "$CACHE/models--acme--pair/snapshots/$C1/merges.txt" ]'
run uni pull acme/unigram
check "a UNIGRAM tokenizer.model is refused before the weights" '[ "$rc" -eq 1 ] && has "$T/uni.err" "UNIGRAM" && hasnt "$T/uni.log" "model.safetensors" && has "$T/uni.err" "Nothing else was downloaded"'
run notok pull acme/notok
check "no tokenizer at all: refused, nothing downloaded" '[ "$rc" -eq 1 ] && has "$T/notok.err" "no supported tokenizer" && hasnt "$T/notok.log" "resolve"'
run gg pull acme/ggufonly
check "GGUF-only repo: refused, naming the file" '[ "$rc" -eq 1 ] && has "$T/gg.err" "model.gguf" && hasnt "$T/gg.log" "resolve"'

# 9. weights chosen as transformers chooses
run sh pull acme/sharded
SD="$CACHE/models--acme--sharded/snapshots/$C1"
check "a sharded model: the index and both shards" '[ "$rc" -eq 0 -a -e "$SD/model.safetensors.index.json" -a -e "$SD/model-00001-of-00002.safetensors" -a -e "$SD/model-00002-of-00002.safetensors" ]'
check "a .safetensors the index does not name is not downloaded" 'hasnt "$T/sh.log" "model-old"'

# 10. memory admission before any weight
CALDRIX_MEM_AVAILABLE=100K run mem pull acme/big
check "too big for memory: refused with both numbers" '[ "$rc" -eq 1 ] && has "$T/mem.err" "needs" && has "$T/mem.err" "available" && has "$T/mem.err" "Options"'
check "the memory refusal comes before any weight" 'hasnt "$T/mem.log" "model.safetensors" && hasnt "$T/mem.log" "tokenizer.json"'
CALDRIX_MEM_AVAILABLE=100K run mem2 pull acme/big --fetch-anyway
check "--fetch-anyway fetches it" '[ "$rc" -eq 0 ]'
CALDRIX_MEM_AVAILABLE=100K run mem3 pull acme/big
check "weights already in the cache are not refused again" '[ "$rc" -eq 0 ]'

# 11. adapters
run ad pull acme/adapter
check "full weights identical to the adapter's base: refused as an adapter" '[ "$rc" -eq 1 ] && has "$T/ad.err" "adapter over acme/tiny" && hasnt "$T/ad.log" "/cdn/acme/adapter/"'
run tu pull acme/tuned
check "different weights beside an adapter: runs, adapter files not read" '[ "$rc" -eq 0 ] && has "$T/tu.err" "not read: adapter_config.json, adapter_model.safetensors" && hasnt "$T/tu.log" "adapter_model"'

# 11b. a vision model needs its processor files, fetched before the weights
F=$(mkrepo acme/vlm $C1 '"lfs": ["model.safetensors"]')
cp $SH/fixtures/tokenizers/mistral/tokenizer.json $SH/fixtures/hf/llama/model.safetensors "$F/"
python3 - "$SH/fixtures/hf/llama/config.json" > "$F/config.json" <<'PY'
import json, sys
text = json.load(open(sys.argv[1]))
text.pop("architectures", None)
print(json.dumps({"architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3",
                  "text_config": text, "vision_config": {"hidden_size": 32, "image_size": 64, "patch_size": 16},
                  "scale_factor": 4}))
PY
echo '{"do_resize": true, "size": {"longest_edge": 512}}' > "$F/preprocessor_config.json"
echo '{"image_seq_len": 64}' > "$F/processor_config.json"
run vlm pull acme/vlm
pp=$(grep -n "GET /acme/vlm/resolve/$C1/processor_config.json" $T/vlm.log | cut -d: -f1); wl=$(grep -n "GET /cdn/acme/vlm/" $T/vlm.log | head -1 | cut -d: -f1)
check "a vision model: processor files before the weights" '[ "$rc" -eq 0 -a -n "$pp" -a -n "$wl" ] && [ "$pp" -lt "$wl" ] && [ -e "$CACHE/models--acme--vlm/snapshots/$C1/preprocessor_config.json" ]'
rm "$F/processor_config.json"; rm -rf "$CACHE/models--acme--vlm"
run vlm2 pull acme/vlm
check "a vision model without processor_config.json: refused after config.json" '[ "$rc" -eq 1 ] && has "$T/vlm2.err" "processor_config.json" && hasnt "$T/vlm2.log" "/cdn/"'

# 12. a cache written the way huggingface_hub writes it is read
HR="$CACHE/models--acme--local"; C3=3333333333333333333333333333333333333333
mkdir -p "$HR/blobs" "$HR/refs" "$HR/snapshots/$C3" "$CACHE/.locks/models--acme--local"
for f in config.json model.safetensors generation_config.json; do
    h=$(sha256sum $SH/fixtures/hf/llama/$f | cut -c1-64); cp $SH/fixtures/hf/llama/$f "$HR/blobs/$h"
    ln -s "../../blobs/$h" "$HR/snapshots/$C3/$f"
done
h=$(sha256sum $SH/fixtures/tokenizers/mistral/tokenizer.json | cut -c1-64); cp $SH/fixtures/tokenizers/mistral/tokenizer.json "$HR/blobs/$h"
ln -s "../../blobs/$h" "$HR/snapshots/$C3/tokenizer.json"
printf '%s' "$C3" > "$HR/refs/main"
HF_HUB_OFFLINE=1 run hfc pull acme/local
check "a huggingface_hub cache tree is read offline" '[ "$rc" -eq 0 -a "$(cat $T/hfc.out)" = "$HR/snapshots/$C3" ]'
run hfi inspect acme/local --json
check "inspect reads it from the cache without a request" '[ "$rc" -eq 0 ] && has "$T/hfi.out" '\''"architecture": "LlamaForCausalLM"'\'' && [ ! -s "$T/hfi.log" ]'
HF_HUB_CACHE="$T/other" HF_HUB_OFFLINE=1 run hfc2 pull acme/local
check "HF_HUB_CACHE wins over HF_HOME" '[ "$rc" -eq 1 ] && has "$T/hfc2.err" "$T/other"'

# 13. Ollama
run ol pull ollama:tiny:q8
OM="$CALDRIX_CACHE/ollama/models/127.0.0.1_$PORT/library/tiny/q8"
OSHA=$(sha256sum $SH/fixtures/hf-gguf/qwen3.gguf | cut -c1-64)
check "ollama:tiny:q8 resolves to a model.gguf" '[ "$rc" -eq 0 -a "$(cat $T/ol.out)" = "$OM/model.gguf" ]'
check "the GGUF blob is stored by digest and verified" 'cmp -s "$CALDRIX_CACHE/ollama/blobs/sha256-$OSHA" $SH/fixtures/hf-gguf/qwen3.gguf'
check "model.gguf links to the blob" '[ "$(readlink -f $OM/model.gguf)" = "$(readlink -f $CALDRIX_CACHE/ollama/blobs/sha256-$OSHA)" ]'
check "template and params layers are kept beside it" '[ -e "$OM/template" -a -e "$OM/params" ]'
check "the manifest was asked for with the v2 media type" 'has "$T/ol.log" "GET /v2/library/tiny/manifests/q8"'
check "the manifest is stored" '[ -s "$CALDRIX_CACHE/ollama/manifests/127.0.0.1_$PORT/library/tiny/q8" ]'
check "the GGUF header was read (a Range request) before the download" 'grep -q "range=bytes=0-" "$T/ol.log"'
CALDRIX_OFFLINE=1 run olrun run ollama:tiny:q8 --prompt-ids "$PIDS" -n 4 --temp 0 --ignore-eos --json
check "caldrix run ollama:tiny:q8 gives the same golden tokens" '[ "$rc" -eq 0 ] && python3 -c "import json,sys; assert json.load(open(sys.argv[1]))[\"tokens\"]==[int(x) for x in sys.argv[2].split(\",\")]" "$T/olrun.out" "$GTOK"'
run oli inspect ollama:tiny:q8
check "inspect ollama:tiny:q8 from the cache" '[ "$rc" -eq 0 ] && has "$T/oli.out" "architecture=qwen3" && has "$T/oli.out" "missing_required_tensors=none"'
CALDRIX_OFFLINE=1 run oloff pull ollama:tiny:q8
check "CALDRIX_OFFLINE=1: an Ollama model from the cache, no request" '[ "$rc" -eq 0 -a ! -s "$T/oloff.log" ]'
CALDRIX_OFFLINE=1 run oloff2 pull ollama:tiny:nothere
check "CALDRIX_OFFLINE=1: an uncached tag is refused" '[ "$rc" -eq 1 ] && has "$T/oloff2.err" "CALDRIX_OFFLINE"'
run olbad pull ollama:tiny:bad
check "a wrong digest is refused" '[ "$rc" -eq 1 ] && has "$T/olbad.err" "digest mismatch"'
check "the bad download is neither promoted nor kept" '[ -z "$(ls $CALDRIX_CACHE/ollama/blobs | grep -v -e "$OSHA" -e "^sha256-[0-9a-f]*$" )" ] && [ ! -e "$CALDRIX_CACHE/ollama/manifests/127.0.0.1_$PORT/library/tiny/bad" ] && [ ! -e "$CALDRIX_CACHE/ollama/blobs/sha256-$(sha256sum $SH/fixtures/hf-gguf/llama.gguf | cut -c1-64)" ]'
run olcut pull ollama:tiny:cut
run olcut2 pull ollama:tiny:cut
check "an Ollama blob cut mid-file resumes with Range" '[ "$rc" -eq 0 ] && has "$T/olcut2.log" "range=bytes=200000-" && cmp -s "$(cat $T/olcut2.out)" $SH/fixtures/hf-gguf/qwen2.gguf'
run olns pull ollama:someone/tiny
check "ollama:namespace/name defaults to :latest" '[ "$rc" -eq 0 ] && has "$T/olns.log" "GET /v2/someone/tiny/manifests/latest"'
run olmiss pull ollama:tiny:nope
check "an unknown Ollama tag: 404 named" '[ "$rc" -eq 1 ] && has "$T/olmiss.err" "no such model or tag"'
run oinfo models info ollama:tiny:q8 --json
check "models info of a cached Ollama tag" '[ "$rc" -eq 0 ] && has "$T/oinfo.out" "\"complete\": true" && has "$T/oinfo.out" "\"architecture\": \"qwen3\"" && [ ! -s "$T/oinfo.log" ]'
rm -rf "$CALDRIX_CACHE/ollama/blobs"
CALDRIX_MEM_AVAILABLE=200K run olmem pull ollama:someone/tiny
check "Ollama: sized from the manifest and the GGUF header, refused before the download" '[ "$rc" -eq 1 ] && has "$T/olmem.err" "KV cache" && [ "$(grep -c '\''/ollama-cdn/'\'' $T/olmem.log)" -eq 1 ] && grep -q "range=bytes=0-" "$T/olmem.log"'

# 14. models info / search from the cache
run info models info acme/tiny --json
check "models info: refs and a complete snapshot" '[ "$rc" -eq 0 ] && has "$T/info.out" '\''"main": "'\''$C1'\''"'\'' && has "$T/info.out" '\''"complete": true'\'''
run oinfo2 models info ollama:tiny:q8 --json
check "models info of an Ollama tag whose blob is gone: incomplete" '[ "$rc" -eq 0 ] && has "$T/oinfo2.out" "\"complete\": false" && [ ! -s "$T/oinfo2.log" ]'
run srch models search tiny
check "models search finds cached repos and Ollama tags" '[ "$rc" -eq 0 ] && has "$T/srch.out" "acme/tiny" && has "$T/srch.out" "ollama:tiny:q8"'
run ins inspect acme/cut
check "inspect of a cached repo" '[ "$rc" -eq 0 ] && has "$T/ins.out" "architecture=Qwen2ForCausalLM"'
run ins2 inspect acme/notcached
check "inspect never downloads" '[ "$rc" -eq 1 ] && [ ! -s "$T/ins2.log" ]'

# 15. models list and models rm
run olq pull ollama:tiny:q8
run lst models list --json
check "models list: every cached repo and tag, with its size and whether it runs" '[ "$rc" -eq 0 ] && python3 - "$T/lst.out" "$CACHE" <<'\''PY'\''
import json, os, sys
rows = {r["ref"]: r for r in json.load(open(sys.argv[1]))}
blobs = os.path.join(sys.argv[2], "models--acme--tiny", "blobs")
size = sum(os.path.getsize(os.path.join(blobs, f)) for f in os.listdir(blobs))
t, g, o = rows["acme/tiny"], rows["acme/gpt2ish"], rows["ollama:tiny:q8"]
assert t["complete"] and t["runs"] and t["bytes"] == size, t
assert not g["runs"] and g["problem"], g
assert o["complete"] and o["runs"] and o["bytes"] == os.path.getsize(o["path"]), o
PY'
run lst2 models list
check "models list prints one line per model" '[ "$rc" -eq 0 ] && grep -q "^acme/tiny .* yes$" $T/lst2.out && grep -q "^acme/gpt2ish .* no" $T/lst2.out && [ ! -s "$T/lst2.log" ]'
run rm1 models rm acme/tiny
check "models rm removes the repo from the cache" '[ "$rc" -eq 0 ] && [ ! -e "$CACHE/models--acme--tiny" ] && has "$T/rm1.out" "removed acme/tiny"'
run rm2 models rm acme/tiny
check "models rm of what is not in the cache: exit 1, nothing removed" '[ "$rc" -eq 1 ] && has "$T/rm2.err" "not in the cache" && [ -e "$CACHE/models--acme--cut" ]'
run rm3 models rm acme/cut@v1
check "models rm with a revision: exit 2 (rm takes the whole repo)" '[ "$rc" -eq 2 ] && [ -e "$CACHE/models--acme--cut" ]'
OB=$(readlink -f "$(cat $T/olq.out)")
run rm4 models rm ollama:tiny:q8
check "models rm of an Ollama tag: manifest, model folder and its blob removed" '[ "$rc" -eq 0 ] && [ ! -e "$CALDRIX_CACHE/ollama/manifests/127.0.0.1_$PORT/library/tiny/q8" ] && [ ! -e "$(dirname $(cat $T/olq.out))" ] && [ ! -e "$OB" ]'
run rm5 models rm ollama:tiny:q8
check "models rm of an Ollama tag not in the cache: exit 1" '[ "$rc" -eq 1 ] && has "$T/rm5.err" "not in the cache"'
run lst3 models list --json
check "models list no longer shows what rm removed" '[ "$rc" -eq 0 ] && hasnt "$T/lst3.out" "\"acme/tiny\"" && hasnt "$T/lst3.out" "ollama:tiny:q8"'

echo "hub_net: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
