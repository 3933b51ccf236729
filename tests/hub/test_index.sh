#!/usr/bin/env bash
# caldrix models update / search / info / related / drafts (the model index, SQLite) against the fake
# Hub's synthetic catalogue (tests/hub/fake_hub.js: a few thousand repos from a seed), and digest
# checking on pull. Expected answers are computed here, in Python, from the catalogue the fake Hub
# dumps (catalogue.dump.json), never from caldrix's own output.
set -u
cd "$(dirname "$0")/../.."
CALDRIX=${CALDRIX:-$PWD/build/caldrix}
SH=../shared
passed=0; failed=0
ok()   { passed=$((passed+1)); echo "ok - $1"; }
bad()  { failed=$((failed+1)); echo "not ok - $1"; [ -n "${2:-}" ] && echo "    $2"; }
check() { if eval "$2"; then ok "$1"; else bad "$1" "failed: $2"; fi; }
has()  { grep -qF -- "$2" "$1"; }
hasnt() { ! grep -qF -- "$2" "$1"; }

T=$(mktemp -d /tmp/caldrix-index.XXXXXX)
SERVER_PID=
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
[ -n "${KEEP_T:-}" ] && trap 'kill $SERVER_PID' EXIT
if ! command -v node >/dev/null || ! command -v sqlite3 >/dev/null; then
    echo "node and sqlite3 are needed"; echo "index: 0 passed, 1 failed"; exit 1
fi

# ---- the Hub: the catalogue, and file-based repos for info and digests ----
mkdir -p "$T/srv/api" "$T/srv/hf"
N=2000
echo "{\"seed\": 43, \"n\": $N}" > "$T/srv/api/catalogue.json"
echo '{"bad_ids": true}' > "$T/srv/api/faults.json"
C1=1111111111111111111111111111111111111111
mkrepo() { local d="$T/srv/hf/$1"; mkdir -p "$d/files"; echo "{\"commit\": \"$2\"${3:+, $3}}" > "$d/repo.json"; echo "$d/files"; }
F=$(mkrepo acme/tiny $C1 '"lfs": ["model.safetensors"]')
cp $SH/fixtures/hf/qwen3/config.json $SH/fixtures/hf/qwen3/model.safetensors $SH/fixtures/tokenizers/mistral/tokenizer.json "$F/"
F=$(mkrepo acme/tampered $C1 '"lfs": ["model.safetensors"], "tamper": ["model.safetensors"]')
cp $SH/fixtures/hf/qwen3/config.json $SH/fixtures/hf/qwen3/model.safetensors $SH/fixtures/tokenizers/mistral/tokenizer.json "$F/"

LOG="$T/requests.log"; : > "$LOG"
node tests/hub/fake_hub.js "$T/srv" "$T/port" "$LOG" 600 &
SERVER_PID=$!
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.1; done
PORT=$(cat "$T/port" 2>/dev/null)
if [ -z "$PORT" ]; then echo "fake server did not start"; echo "index: 0 passed, 1 failed"; exit 1; fi

unset HF_TOKEN HF_TOKEN_PATH HF_HUB_CACHE HUGGINGFACE_HUB_CACHE HF_HUB_OFFLINE CALDRIX_OFFLINE XDG_CACHE_HOME
export HF_HOME="$T/hfhome" CALDRIX_CACHE="$T/cx" HF_ENDPOINT="http://127.0.0.1:$PORT" CALDRIX_MEM_AVAILABLE=64G
DB="$CALDRIX_CACHE/models-index.sqlite"
run() { # run NAME ARGS...: stdout $T/NAME.out, stderr $T/NAME.err, the requests it made $T/NAME.log, status $rc
    local n=$1; shift
    cp "$LOG" "$LOG.before"
    timeout 300 "$CALDRIX" "$@" > "$T/$n.out" 2> "$T/$n.err"; rc=$?
    tail -n +$(( $(wc -l < "$LOG.before") + 1 )) "$LOG" > "$T/$n.log"
}
# py NAME: runs the Python on stdin with the catalogue dump, the index and $T as arguments
py() { python3 - "$T/srv/api/catalogue.dump.json" "$DB" "$T" "$@"; }
EXPECT=$(cat <<'PY'
import json, math, re, sqlite3, struct, sys
cat = json.load(open(sys.argv[1]))
by = {r["id"]: r for r in cat}
HF = {"Qwen3ForCausalLM", "LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM", "Qwen3MoeForCausalLM"}
GG = {"qwen3", "llama", "qwen2", "qwen3moe"}
def judgeable(r):
    return (r["arch"] in HF and "config.json" in r["files"]) or (r["gguf_arch"] in GG)
def bases(r):
    return [t.split(":")[-1] for t in r["tags"] if t.startswith("base_model:")]
J = {r["id"] for r in cat if judgeable(r)}
INDEX = J | {r["id"] for r in cat if r["id"] not in J and any(b in J for b in bases(r))}
def verdict(r):
    if r["kind"] == "gguf": return "runs"
    if r["gated"]: return "unknown"   # its config.json needs a token
    if r["kind"] in ("adapter", "gptq"): return "refused"
    return "refused" if '"gelu"' in (r["config"] or "") else "runs"
def fmt(r): return "gguf" if r["kind"] == "gguf" else "adapter" if r["kind"] == "adapter" else "safetensors"
def order(ids): return sorted(ids, key=lambda i: (-by[i]["downloads"], i))
PY
)

# 0. before any update
run s0 models search qwen3
check "search without an index: says so and searches aliases and caches (exit 0)" '[ "$rc" -eq 0 ] && has "$T/s0.err" "models update" && [ ! -s "$T/s0.log" ]'
run r0 models related Qwen/Qwen3-8B
check "related without an index: exit 1 naming models update" '[ "$rc" -eq 1 ] && has "$T/r0.err" "caldrix models update"'
CALDRIX_OFFLINE=1 run u0 models update
check "CALDRIX_OFFLINE: update refused, no request, no index made" '[ "$rc" -eq 1 ] && has "$T/u0.err" "CALDRIX_OFFLINE" && [ ! -s "$T/u0.log" ] && [ ! -e "$DB" ]'
HF_HUB_OFFLINE=1 run u0b models update
check "HF_HUB_OFFLINE: update refused too" '[ "$rc" -eq 1 ] && has "$T/u0b.err" "HF_HUB_OFFLINE" && [ ! -s "$T/u0b.log" ]'

# 1. the first update: the whole listing, ids with path tricks skipped
run u1 models update --page-size 300 --json
check "update exits 0" '[ "$rc" -eq 0 ]' || { head -5 "$T/u1.err"; }
check "update: progress on stderr, the summary on stdout" 'has "$T/u1.err" "caldrix: models update: page 1" && has "$T/u1.out" "\"published\""'
check "update read every page through Link rel=next (7 pages of 300 for 2000 repos)" '[ "$(grep -c "^GET /api/models?" $T/u1.log)" -eq 7 ] && python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert s[\"pages\"]==7 and s[\"listed\"]==2006, s" "$T/u1.out"'
check "the listing asks as huggingface_hub does (sort=lastModified, direction=-1, limit, expand[])" 'head -1 "$T/u1.log" | grep -q "^GET /api/models?sort=lastModified&direction=-1&limit=300&expand%5B%5D=sha"'
check "ids with path tricks are skipped, named, never requested" 'python3 -c "import json,sys; assert json.load(open(sys.argv[1]))[\"bad_ids\"]==6" "$T/u1.out" && has "$T/u1.err" "not a repo id" && ! grep -E "passwd|escape|%2e|hidden|/a/b/c|x/\.\./" "$T/u1.log"'
py > "$T/set.txt" <<PY
$EXPECT
db = sqlite3.connect(sys.argv[2])
got = {r[0] for r in db.execute("select id from repos")}
print("ok" if got == INDEX else "missing %s extra %s" % (sorted(INDEX - got)[:5], sorted(got - INDEX)[:5]), len(got))
PY
check "the index holds exactly the judgeable repos and their base_model relatives ($(cat $T/set.txt))" 'grep -q "^ok" "$T/set.txt"'
py > "$T/detail.txt" <<PY
$EXPECT
import re
detailed = set(re.findall(r"^GET /api/models/([^/?]+/[^/?]+)\?expand", open(sys.argv[3] + "/u1.log").read(), re.M))
print("ok" if detailed == INDEX else "detailed but not indexed %s, indexed but not detailed %s" % (sorted(detailed - INDEX)[:5], sorted(INDEX - detailed)[:5]))
PY
check "details were asked only for what the index keeps ($(cat $T/detail.txt))" 'grep -q "^ok" "$T/detail.txt"'
check "no request left the Hub's API and files (no CDN, no redirect followed)" '! grep -v -E "^GET /api/models|^GET /[^/]+/[^/]+/resolve/[0-9a-f]{40}/(config|adapter_config)\.json$" "$T/u1.log" | grep -q .'
py > "$T/verdicts.txt" <<PY
$EXPECT
db = sqlite3.connect(sys.argv[2])
bad = [(i, v, f) for i, v, f in db.execute("select id, verdict, format from repos") if v != verdict(by[i]) or f != fmt(by[i])]
print("ok" if not bad else bad[:5])
PY
check "every verdict and format is the expected one ($(head -c 200 $T/verdicts.txt))" 'grep -q "^ok" "$T/verdicts.txt"'

# 2. queries, offline from the index
export CALDRIX_OFFLINE=1
run q1 models search roleplay --limit 100000 --json
py > "$T/q1.txt" <<PY
$EXPECT
out = json.load(open(sys.argv[3] + "/q1.out"))
got = [e["id"] for e in out if e["where"] == "index"]
def flat(v):
    return " ".join(flat(x) for x in v) if isinstance(v, list) else " ".join(flat(x) for x in v.values()) if isinstance(v, dict) else str(v)
def text(r):   # what the index searches: the id, the tags and the model card
    return " ".join([r["id"], " ".join(r["tags"]), flat(r["card"])]).lower()
want = order([i for i in INDEX if "roleplay" in re.findall("[a-z0-9]+", text(by[i]))])
print("ok" if got == want else "got %d want %d; first %s vs %s" % (len(got), len(want), got[:3], want[:3]))
PY
check "search: every index repo with the word, ranked by downloads ($(cat $T/q1.txt))" '[ "$rc" -eq 0 ] && grep -q "^ok" "$T/q1.txt" && [ ! -s "$T/q1.log" ]'
run q2 models search qwen3 --format gguf --max-params 2B --limit 100000 --json
py > "$T/q2.txt" <<PY
$EXPECT
got = [e["id"] for e in json.load(open(sys.argv[3] + "/q2.out"))]
want = order([i for i in INDEX if fmt(by[i]) == "gguf" and 0 < by[i]["params"] <= 2e9 and
              any(t.startswith("qwen3") for t in re.findall("[a-z0-9]+", (i + " " + " ".join(by[i]["tags"])).lower()))])
print("ok" if got == want else "got %d want %d" % (len(got), len(want)))
PY
check "search --format gguf --max-params 2B: exactly those ($(cat $T/q2.txt))" '[ "$rc" -eq 0 ] && grep -q "^ok" "$T/q2.txt"'
CALDRIX_MEM_AVAILABLE=20G run q3 models search --arch qwen3 --runnable --limit 100000 --json
py > "$T/q3.txt" <<PY
$EXPECT
db = sqlite3.connect(sys.argv[2])
got = [e["id"] for e in json.load(open(sys.argv[3] + "/q3.out"))]
mem = {i: m for i, m in db.execute("select id, mem_bytes from repos")}
want = order([i for i in INDEX if verdict(by[i]) == "runs" and mem[i] <= 20 << 30 and
              by[i]["arch"] == "Qwen3ForCausalLM" and (fmt(by[i]) == "gguf" or by[i]["kind"] != "adapter")])
print("ok" if got == want else "got %d want %d %s" % (len(got), len(want), sorted(set(want) ^ set(got))[:4]))
PY
check "search --arch qwen3 --runnable under 20G: verdict runs and fits ($(cat $T/q3.txt))" '[ "$rc" -eq 0 ] && grep -q "^ok" "$T/q3.txt"'
py > "$T/mem.txt" <<PY
$EXPECT
db = sqlite3.connect(sys.argv[2])
# Qwen3-8B: bf16 weights (2 bytes a parameter) + a bf16 KV cache of 4096 tokens: 2 x 36 layers x 8 heads x 128 x 4096 x 2
w, m = db.execute("select weight_bytes, mem_bytes from repos where id='Qwen/Qwen3-8B'").fetchone()
want_w = by["Qwen/Qwen3-8B"]["files"]["model.safetensors"]
print("ok" if (w, m) == (want_w, want_w + 2 * 36 * 8 * 128 * 4096 * 2) else (w, m, want_w))
PY
check "mem_bytes = the safetensors bytes + the bf16 KV cache at 4096 tokens ($(cat $T/mem.txt))" 'grep -q "^ok" "$T/mem.txt"'
run q4 models search qwen3 --json --limit 3
check "search --json: the shape of an entry" '[ "$rc" -eq 0 ] && python3 - "$T/q4.out" <<'\''PY'\''
import json, sys
out = json.load(open(sys.argv[1]))
assert len(out) >= 3, out
keys = {"ref": str, "where": str, "id": str, "architecture": str, "family": str, "format": str, "params": int, "dtype": str,
        "weight_bytes": int, "mem_bytes": int, "moe": bool, "verdict": str, "fits": bool, "runnable": bool, "gated": bool,
        "downloads": int, "likes": int, "last_modified": str, "tokenizer": str, "children": int, "bases": list, "tags": list}
for e in out[:3]:
    for k, t in keys.items(): assert isinstance(e[k], t), (k, e)
    assert "refusal" in e and "lora" in e
PY'
run q5 models search qwen3 --format onnx
check "search --format onnx: exit 2 naming the value" '[ "$rc" -eq 2 ] && has "$T/q5.err" "onnx"'
run q6 models search qwen3 --max-params lots
check "search --max-params lots: exit 2 naming the value" '[ "$rc" -eq 2 ] && has "$T/q6.err" "lots"'

run i1 models info Qwen/Qwen3-8B --json
check "info: files with their sizes, verdict, what this machine runs" '[ "$rc" -eq 0 ] && [ ! -s "$T/i1.log" ] && python3 - "$T/i1.out" "$T/srv/api/catalogue.dump.json" <<'\''PY'\''
import json, sys
e = json.load(open(sys.argv[1]))["index"]
r = {x["id"]: x for x in json.load(open(sys.argv[2]))}["Qwen/Qwen3-8B"]
assert {f["name"]: f["size"] for f in e["files"]} == r["files"], e["files"]
assert e["verdict"] == "runs" and e["runnable"] and e["params"] == r["params"] and e["architecture"] == "Qwen3ForCausalLM"
assert e["dtype"] == "BF16" and not e["gated"] and e["tokenizer"].startswith("git:") and e["derived"]["finetune"] >= 1
PY'
run i2 models info meta-llama/Llama-3.2-4B
check "info (text) of a gated repo: listed with its files, not judged without a token" '[ "$rc" -eq 0 ] && has "$T/i2.out" "verdict: unknown" && has "$T/i2.out" "gated repo" && has "$T/i2.out" "file model.safetensors"'
sqlite3 "$DB" "delete from repos where id='meta-llama/Llama-3.2-4B'"
CALDRIX_OFFLINE= HF_TOKEN=hf_good_token run i2b models info meta-llama/Llama-3.2-4B --json
check "with a token the gated repo is judged (info of a repo the index lacks asks the Hub, token sent)" '[ "$rc" -eq 0 ] && grep -q "config.json auth=good" "$T/i2b.log" && python3 -c "import json,sys; e=json.load(open(sys.argv[1]))[\"index\"]; assert e[\"verdict\"]==\"runs\" and e[\"gated\"], e" "$T/i2b.out"'
CALDRIX_MEM_AVAILABLE=1G run i3 models info Qwen/Qwen3-8B
check "info under 1G: does not fit this machine" '[ "$rc" -eq 0 ] && has "$T/i3.out" "does not fit in memory"'

# the float rule: every adapter's lora_alpha (a 32-bit float) as the shortest decimal that reads back to it
ADS=$(py <<PY
$EXPECT
seen = {}
for i in sorted(INDEX):
    if by[i]["kind"] == "adapter" and by[i]["alpha"] not in seen: seen[by[i]["alpha"]] = i
print(" ".join(seen.values()))
PY
)
: > "$T/alphas.txt"
for a in $ADS; do run al models info "$a" --json; grep -o '"alpha": [^,}]*' "$T/al.out" | sed "s|^|$a |" >> "$T/alphas.txt"; done
check "the float rule: each lora_alpha is the shortest decimal that reads back to its float32 ($(wc -l < $T/alphas.txt) values)" 'python3 - "$T/alphas.txt" "$T/srv/api/catalogue.dump.json" <<'\''PY'\''
import json, struct, sys
by = {x["id"]: x for x in json.load(open(sys.argv[2]))}
f32 = lambda v: struct.unpack("f", struct.pack("f", v))[0]
lines = open(sys.argv[1]).read().split("\n")[:-1]
assert len(lines) >= 8, lines
for line in lines:
    repo, _, text = line.split(" ", 2)
    want = f32(by[repo]["alpha"])
    assert f32(float(text)) == want, line
    from decimal import Decimal
    digits = len(Decimal(text).normalize().as_tuple().digits)
    for p in range(1, digits):   # no shorter decimal reads back to the same float
        assert f32(float("%.*g" % (p, want))) != want, (line, p)
assert any(l.endswith(" 0.1") for l in lines) and any(l.endswith(" 0.3") for l in lines), lines
PY'

run rq models related Qwen/Qwen3-8B --quantizations --json
run rf models related Qwen/Qwen3-8B --finetunes --json
run rt models related Qwen/Qwen3-8B --twins --json
run ra models related Qwen/Qwen3-8B --json
py > "$T/rel.txt" <<PY
$EXPECT
def ids(n): return [e["id"] for e in json.load(open(sys.argv[3] + "/" + n + ".out"))]
kid = lambda k: order([i for i in INDEX if by[i]["parent"] == "Qwen/Qwen3-8B" and by[i]["kind"] in k])
ok = ids("rq") == kid(("gguf", "gptq")) and ids("rf") == kid(("finetune",)) and ids("rt") == kid(("gguf",))
allk = json.load(open(sys.argv[3] + "/ra.out"))
ok = ok and sorted(e["id"] for e in allk) == sorted(i for i in INDEX if by[i]["parent"] == "Qwen/Qwen3-8B")
print("ok" if ok and len(ids("rq")) > 0 and len(ids("rt")) < len(ids("rq")) else (ids("rq")[:3], kid(("gguf", "gptq"))[:3]))
PY
check "related --quantizations / --finetunes / --twins / all: the catalogue's children ($(cat $T/rel.txt))" 'grep -q "^ok" "$T/rel.txt"'
run rb models related "$(python3 -c 'import json,sys; print([e["id"] for e in json.load(open(sys.argv[1]))][0])' $T/rt.out)" --twins --json
check "related --twins of a GGUF repo: its safetensors base" '[ "$rc" -eq 0 ] && has "$T/rb.out" "\"id\": \"Qwen/Qwen3-8B\"" && has "$T/rb.out" "\"direction\": \"base\""'

run d1 models drafts Qwen/Qwen3-32B --json
py > "$T/d1.txt" <<PY
$EXPECT
db = sqlite3.connect(sys.argv[2])
got = [e["id"] for e in json.load(open(sys.argv[3] + "/d1.out"))]
t = by["Qwen/Qwen3-32B"]
mem = {i: m for i, m in db.execute("select id, mem_bytes from repos")}
c = [i for i in INDEX if i != t["id"] and by[i]["tokenizer"] == t["tokenizer"] and fmt(by[i]) == "safetensors"
     and by[i]["kind"] != "gptq" and verdict(by[i]) == "runs" and 0 < by[i]["params"] * 4 <= t["params"] and mem[i] <= 64 << 30]
want = sorted(c, key=lambda i: (not i.startswith("Qwen/"), -by[i]["downloads"], by[i]["params"], i))[:20]
print("ok" if got == want and len(got) > 3 else (got[:4], want[:4]))
PY
check "drafts: same tokenizer, a quarter of the parameters or less, runs, same owner first ($(cat $T/d1.txt))" '[ "$rc" -eq 0 ] && grep -q "^ok" "$T/d1.txt"'
run d2 models drafts Qwen/Qwen3-0.5B
check "drafts of the smallest model: none, said so" '[ "$rc" -eq 0 ] && has "$T/d2.out" "no draft candidate"'
run d3 models related acme/../../etc
check "related of a repo id with path tricks: not in the index, exit 1" '[ "$rc" -eq 1 ] && has "$T/d3.err" "not in the model index"'

run o1 models info acme/tiny --json
check "offline: info of a repo the index lacks says so and asks nothing" '[ "$rc" -eq 0 ] && has "$T/o1.err" "CALDRIX_OFFLINE" && [ ! -s "$T/o1.log" ] && has "$T/o1.out" "\"index\": null"'
unset CALDRIX_OFFLINE
HF_HUB_OFFLINE=1 run o2 models search roleplay
check "HF_HUB_OFFLINE: search works from the index without a request" '[ "$rc" -eq 0 ] && [ ! -s "$T/o2.log" ] && grep -q roleplay "$T/o2.out"'
run o3 models info acme/tiny --json
check "online: a repo the index lacks is asked of the Hub and added" '[ "$rc" -eq 0 ] && grep -q "^GET /api/models/acme/tiny?expand" "$T/o3.log" && [ "$(sqlite3 $DB "select verdict from repos where id='\''acme/tiny'\''")" = runs ]'

# 3. incremental: generation 1 re-dates 25 repos and adds 25 newer ones
echo '{}' > "$T/srv/api/faults.json"
echo "{\"seed\": 43, \"n\": $N, \"generation\": 1, \"touched\": 25}" > "$T/srv/api/catalogue.json"
run u2 models update --page-size 300 --json
py > "$T/u2.txt" <<PY
$EXPECT
import re
db = sqlite3.connect(sys.argv[2])
got = {r[0]: r[1] for r in db.execute("select id, sha from repos")}
missing = sorted(INDEX - set(got))
stale = [i for i in INDEX if i in got and got[i] != by[i]["sha"]]
log = open(sys.argv[3] + "/u2.log").read()
detailed = set(re.findall(r"^GET /api/models/([^/?]+/[^/?]+)\?expand", log, re.M))
changed = {i for i in INDEX if by[i]["sha"] != __import__("hashlib").sha1((i + ":0").encode()).hexdigest()}
print("ok" if not missing and not stale and detailed == changed and log.count("GET /api/models?") == 1
      else (missing[:3], stale[:3], len(detailed), len(changed), log.count("GET /api/models?")))
PY
check "incremental update: one page, only the changed repos detailed, index current ($(cat $T/u2.txt))" '[ "$rc" -eq 0 ] && grep -q "^ok" "$T/u2.txt"'
run u3 models update --page-size 300 --json
check "an update with nothing new details nothing" '[ "$rc" -eq 0 ] && ! grep -q "expand%5B%5D=cardData" "$T/u3.log" && [ "$(grep -c "^GET /api/models?" $T/u3.log)" -eq 1 ]'

# 4. interrupted: killed mid-way, the old index intact, the next update goes on from the staged pages
sqlite3 "$DB" "select id, sha from repos order by id" > "$T/before.txt"
echo "{\"seed\": 43, \"n\": $N, \"generation\": 2, \"touched\": 25}" > "$T/srv/api/catalogue.json"
echo '{"delay_ms": 40}' > "$T/srv/api/faults.json"
cp "$LOG" "$LOG.before"
"$CALDRIX" models update --page-size 10 > "$T/k.out" 2> "$T/k.err" &   # no timeout(1): the kill must reach caldrix
KPID=$!
for _ in $(seq 300); do
    [ "$(tail -n +$(( $(wc -l < "$LOG.before") + 1 )) "$LOG" | grep -c "^GET /api/models?")" -ge 3 ] && break; sleep 0.05
done
sleep 0.2; kill -9 $KPID 2>/dev/null; wait $KPID 2>/dev/null
check "the update was killed mid-way (it had asked for a third page)" '[ "$(tail -n +$(( $(wc -l < "$LOG.before") + 1 )) "$LOG" | grep -c "^GET /api/models?")" -ge 3 ] && ! has "$T/k.out" "model index:"'
sqlite3 "$DB" "select id, sha from repos order by id" > "$T/after.txt"
check "killed: the index is exactly as before, and readable" 'cmp -s "$T/before.txt" "$T/after.txt" && [ "$(sqlite3 $DB "pragma integrity_check")" = ok ]'
run k2 models search fresh --json --limit 1000
check "killed: search still answers from the old index (no generation-2 repo)" '[ "$rc" -eq 0 ] && has "$T/k2.out" "newcomer1/" && hasnt "$T/k2.out" "newcomer2/"'
echo '{}' > "$T/srv/api/faults.json"
run k3 models update --page-size 10 --json
check "the next update goes on from the staged pages (not from page 1)" '[ "$rc" -eq 0 ] && python3 -c "import json,sys; assert json.load(open(sys.argv[1]))[\"resumed\"]" "$T/k3.out" && ! head -1 "$T/k3.log" | grep -q "^GET /api/models?sort=lastModified&direction=-1&limit=10&expand%5B%5D=sha&expand%5B%5D=lastModified&expand%5B%5D=tags&expand%5B%5D=config&expand%5B%5D=gguf$"'
py > "$T/k3.txt" <<PY
$EXPECT
db = sqlite3.connect(sys.argv[2])
got = {r[0]: r[1] for r in db.execute("select id, sha from repos")}
print("ok" if all(got.get(i) == by[i]["sha"] for i in INDEX if i in by) and INDEX <= set(got) else "stale")
PY
check "after the resumed update the index is current (generation 2)" 'grep -q "^ok" "$T/k3.txt"'

# 5. faults: a malformed page, a looping Link, a Link to another host: clear errors, the index intact
fault_case() { # NAME FAULTS GENERATION WHAT
    fc=$1
    echo "{\"seed\": 43, \"n\": $N, \"generation\": $3, \"touched\": 25}" > "$T/srv/api/catalogue.json"
    echo "$2" > "$T/srv/api/faults.json"
    sqlite3 "$DB" "select id, sha from repos order by id" > "$T/before.txt"
    run "$fc" models update --page-size 10
    sqlite3 "$DB" "select id, sha from repos order by id" > "$T/after.txt"
    check "$4: exit 1, named, the index as it was" '[ "$rc" -eq 1 ] && has "$T/$fc.err" "index is as it was" && cmp -s "$T/before.txt" "$T/after.txt"'
}
fault_case f1 '{"malformed_page": 2}' 3 "a page of malformed JSON"
check "the malformed page is named as not JSON, with its URL" 'has "$T/f1.err" "page 2 of the listing" && has "$T/f1.err" "not JSON"'
fault_case f2 '{"loop_page": 2}' 3 "a Link header that loops"
check "the loop is named" 'has "$T/f2.err" "loops back to a page already read"'
fault_case f3 '{"foreign_link": true}' 3 "a Link rel=next to another host"
check "the foreign link is refused before any request to it" 'has "$T/f3.err" "refused" && [ "$(grep -c "^GET /api/models?" $T/f3.log)" -eq 1 ]'
echo '{}' > "$T/srv/api/faults.json"
run f4 models update --page-size 10
check "with the faults gone, the next update completes (going on from what was staged)" '[ "$rc" -eq 0 ] && has "$T/f4.out" "went on from an interrupted update" && [ -n "$(sqlite3 $DB "select id from repos where id like '\''newcomer3/%'\'' limit 1")" ]'

# 5b. repos deleted from the Hub: an incremental update cannot see them (the listing has no
# tombstones); a whole listing (--full, no search or filter) drops them and their relations
sqlite3 "$DB" "select id from repos order by id" > "$T/d0.txt"
echo "{\"seed\": 43, \"n\": $N, \"generation\": 3, \"touched\": 25, \"deleted\": 40}" > "$T/srv/api/catalogue.json"
run d1 models update --page-size 300 --json
check "deletions: an incremental update removes nothing" '[ "$rc" -eq 0 ] && python3 -c "import json,sys; assert json.load(open(sys.argv[1]))[\"removed\"] == 0" "$T/d1.out" && [ "$(sqlite3 $DB "select count(*) from repos")" -eq "$(wc -l < $T/d0.txt)" ]'
run d2 models update --full --page-size 300 --json
py > "$T/d2.txt" <<PY
$EXPECT
db = sqlite3.connect(sys.argv[2])
got = {r[0]: r[1] for r in db.execute("select id, sha from repos")}
before = set(open(sys.argv[3] + "/d0.txt").read().split())
gone = before - set(by)              # indexed before, deleted from the Hub since (or never listed)
out = json.load(open(sys.argv[3] + "/d2.out"))
rel_gone = db.execute("select count(*) from rel where child not in (select id from repos) and child in (%s)"
                      % ",".join("?" * len(gone)), sorted(gone)).fetchone()[0] if gone else 0
fts = db.execute("select count(*) from repos_fts").fetchone()[0]
ok = (len(gone) >= 20 and not (gone & set(got)) and INDEX <= set(got) and set(got) <= INDEX | before - gone
      and out["removed"] == len(gone) and rel_gone == 0 and fts == len(got))
print("ok %d removed" % len(gone) if ok else ("bad", len(gone), sorted(gone & set(got))[:3], sorted(INDEX - set(got))[:3],
                                             out.get("removed"), rel_gone, fts, len(got)))
PY
check "deletions: update --full drops the repos the Hub no longer lists, their relations and search rows ($(cat $T/d2.txt))" '[ "$rc" -eq 0 ] && grep -q "^ok" "$T/d2.txt"'
gone1=$(python3 -c "import json,sys; by={r['id'] for r in json.load(open(sys.argv[1]))}; print([i for i in sorted(set(open(sys.argv[2]).read().split()) - by) if not i.startswith('acme/')][0])" "$T/srv/api/catalogue.dump.json" "$T/d0.txt")
run d3 models search "${gone1#*/}" --json --limit 1000
check "deletions: search no longer finds a deleted repo ($gone1)" '[ "$rc" -eq 0 ] && hasnt "$T/d3.out" "\"$gone1\""'

# 6. a corrupt index: a clear error, never a crash
cp "$DB" "$T/good.sqlite"
head -c 4096 "$T/good.sqlite" > "$DB"; rm -f "$DB-wal" "$DB-shm"
run c1 models search qwen3
check "a truncated index: exit 1, named as corrupt" '[ "$rc" -eq 1 ] && has "$T/c1.err" "corrupt or not a caldrix index" && has "$T/c1.err" "$DB"'
echo "this is not a database at all, it is text" > "$DB"
run c2 models related Qwen/Qwen3-8B
check "a file that is not a database: exit 1, named" '[ "$rc" -eq 1 ] && has "$T/c2.err" "corrupt or not a caldrix index"'
run c3 models update
check "update over a corrupt index: exit 1, named (nothing overwritten)" '[ "$rc" -eq 1 ] && has "$T/c3.err" "corrupt or not a caldrix index" && [ ! -s "$T/c3.log" ] && has "$DB" "not a database"'
cp "$T/good.sqlite" "$DB"

# 7. digests on pull: a tampered LFS file is refused and never enters the cache
run p1 pull acme/tampered
SHA=$(sha256sum $SH/fixtures/hf/qwen3/model.safetensors | cut -c1-64)
R="$HF_HOME/hub/models--acme--tampered"
check "a tampered download is refused with both digests" '[ "$rc" -eq 1 ] && has "$T/p1.err" "sha256" && has "$T/p1.err" "$SHA" && has "$T/p1.err" "nothing was stored"'
check "the tampered file is not in the cache (no blob, no .incomplete, no snapshot link)" '[ ! -e "$R/blobs/$SHA" ] && [ ! -e "$R/blobs/$SHA.incomplete" ] && [ ! -e "$R/snapshots/$C1/model.safetensors" ]'
run p2 pull acme/tiny
check "an intact download passes the digest check" '[ "$rc" -eq 0 ] && cmp -s "$HF_HOME/hub/models--acme--tiny/blobs/$SHA" $SH/fixtures/hf/qwen3/model.safetensors'

B="$HF_HOME/hub/models--acme--tiny/blobs/$SHA"
printf 'X' | dd of="$B" bs=1 seek=100 conv=notrunc 2>/dev/null
run p3 pull acme/tiny
check "a damaged file already in the cache is kept without --verify (not hashed again)" '[ "$rc" -eq 0 ] && hasnt "$T/p3.log" "/cdn/"'
run p4 pull acme/tiny --verify
check "pull --verify hashes the kept files and refuses the damaged one, naming both digests" '[ "$rc" -eq 1 ] && has "$T/p4.err" "damaged" && has "$T/p4.err" "$SHA" && has "$T/p4.err" "models rm acme/tiny"'
rm -rf "$HF_HOME/hub/models--acme--tiny"
run p5 pull acme/tiny
run p6 pull acme/tiny --verify
check "pull --verify of an intact cached model passes" '[ "$rc" -eq 0 ] && hasnt "$T/p6.log" "/cdn/"'

echo "index: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
