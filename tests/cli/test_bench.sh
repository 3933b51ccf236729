#!/usr/bin/env bash
# caldrix bench and caldrix synth: the JSON contract of bench (../shared/design/INTERFACES.md),
# its errors, and synth's files: loadable, deterministic, with llama.cpp's per-tensor types.
set -u
cd "$(dirname "$0")/../.."
CALDRIX=${CALDRIX:-build/caldrix}
M=../shared/models/stories260K/stories260K.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "  ok: $1"; }
bad() { fail=$((fail+1)); echo "  FAIL: $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

# fields that must exist and be positive numbers
positive_json() {
    python3 - "$1" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
need = ["load_ms", "prefill_tok_s", "decode_tok_s", "weight_bytes_per_token", "decode_gb_s"]
bad = [k for k in need if not isinstance(o.get(k), (int, float)) or isinstance(o.get(k), bool) or not o[k] > 0]
if bad:
    print("    missing or not positive:", bad, o); sys.exit(1)
assert o["n_prompt"] == 12 and o["n_gen"] == 5 and o["threads"] == 2, o
assert len(o["decode_tok_s_runs"]) == 2 and min(o["decode_tok_s_runs"]) <= o["decode_tok_s"] <= o["decode_tok_s_best"], o
PY
}

# ---- bench on stories260K ----
"$CALDRIX" bench "$M" -t 2 -p 12 -n 5 -r 2 --json >"$tmp/b.json" 2>"$tmp/err"; rc=$?
check "bench --json on stories260K exits 0" '[ $rc -eq 0 ]'
check "bench --json prints load_ms, prefill_tok_s, decode_tok_s (and bandwidth) as positive numbers" 'positive_json "$tmp/b.json"'
# stories260K's matrices (its README, from the file): 5 layers of q 64x64, k and v 64x32, o 64x64,
# gate, up and down 64x172 = 45,312 multiply-adds a token each, and the output head 512x64 = 32,768
check "bench --json counts a token's matrix multiply-adds and the output head's (259,328 and 32,768)" \
    'python3 -c "import json,sys; o=json.load(open(sys.argv[1])); assert o[\"matmul_macs_per_token\"]==259328 and o[\"head_macs_per_token\"]==32768, o" "$tmp/b.json"'
"$CALDRIX" bench "$M" -t 2 -p 12 -n 5 -r 2 --json --mem-bw 10 >"$tmp/c.json" 2>/dev/null
check "bench --mem-bw adds the decode ceiling" \
    'python3 -c "import json,sys; o=json.load(open(sys.argv[1])); assert o[\"decode_ceiling_tok_s\"]>0 and 0<o[\"decode_ceiling_frac\"]" "$tmp/c.json"'
"$CALDRIX" bench "$M" -t 2 -p 40 -n 6 -r 2 --parallel 3 --prefix-hit --json >"$tmp/p.json" 2>"$tmp/err"; rc=$?
check "bench --parallel 3 --prefix-hit: parallel, aggregate and per-stream decode, both first-token times" \
    '[ $rc -eq 0 ] && python3 -c "
import json,sys; o=json.load(open(sys.argv[1]))
assert o[\"parallel\"]==3 and o[\"aggregate_decode_tok_s\"]>0 and o[\"stream_decode_tok_s\"]>0, o
assert o[\"ttft_ms_cold\"]>0 and o[\"ttft_ms_cached\"]>0, o
assert o[\"prefix_cached_tokens\"]==16, o  # 40 tokens, all but the last 16 cached: one whole block of 16
" "$tmp/p.json"'
"$CALDRIX" bench "$M" -p 20 --prefix-hit >/dev/null 2>"$tmp/err"; rc=$?
check "bench --prefix-hit with a short prompt is a usage error" '[ $rc -eq 2 ] && grep -q -- "--prefix-hit" "$tmp/err"'
"$CALDRIX" bench "$M" --parallel 0 >/dev/null 2>"$tmp/err"; rc=$?
check "bench --parallel 0 is a usage error" '[ $rc -eq 2 ]'
"$CALDRIX" bench "$M" -t 1 -p 4 -n 2 -r 1 --isa scalar >"$tmp/h.txt" 2>&1
check "bench without --json prints load, prefill and decode lines" \
    'grep -q "^load " "$tmp/h.txt" && grep -q "^prefill .*tok/s" "$tmp/h.txt" && grep -q "^decode .*tok/s" "$tmp/h.txt"'
check "bench --help exits 0" '"$CALDRIX" bench --help >/dev/null'
"$CALDRIX" bench >/dev/null 2>&1; rc=$?
check "bench without MODEL is a usage error (2)" '[ $rc -eq 2 ]'
"$CALDRIX" bench "$M" -t 0 >/dev/null 2>"$tmp/err"; rc=$?
check "bench -t 0 is a usage error naming the option" '[ $rc -eq 2 ] && grep -q -- "-t" "$tmp/err"'
"$CALDRIX" bench "$M" --isa vax >/dev/null 2>"$tmp/err"; rc=$?
check "bench --isa with an unknown set is a usage error" '[ $rc -eq 2 ] && grep -q vax "$tmp/err"'
"$CALDRIX" bench "$tmp/none.gguf" >/dev/null 2>"$tmp/err"; rc=$?
check "bench on a missing file exits 1 naming it" '[ $rc -eq 1 ] && grep -q "none.gguf" "$tmp/err"'
head -c 100 "$M" >"$tmp/trunc.gguf"
"$CALDRIX" bench "$tmp/trunc.gguf" >/dev/null 2>"$tmp/err"; rc=$?
check "bench on a truncated GGUF exits 1 with a message" '[ $rc -eq 1 ] && [ -s "$tmp/err" ]'

# ---- synth ----
for t in F16 BF16 Q8_0 Q4_0 Q4_K_M; do
    "$CALDRIX" synth "$tmp/tiny-$t.gguf" --shape tiny --type $t --seed 7 -t 2 2>/dev/null; rc=$?
    "$CALDRIX" bench "$tmp/tiny-$t.gguf" -t 2 -p 12 -n 5 -r 2 --json >"$tmp/t.json" 2>"$tmp/err"
    check "synth tiny $t writes a model that caldrix bench runs" '[ $rc -eq 0 ] && positive_json "$tmp/t.json"'
done
# the opt-in amx-gemm set: F16 and BF16 prompts of whole 16-token tiles through its BF16 tiles
# (tests/kernel/test_kernels.c holds their sums); where the CPU lacks it, a usage error naming the
# sets it has
if "$CALDRIX" doctor | grep -q ' amx-gemm'; then
    for t in F16 BF16; do
        "$CALDRIX" bench "$tmp/tiny-$t.gguf" -t 2 -p 48 -n 4 -r 1 --isa amx-gemm --json >"$tmp/ag.json" 2>/dev/null
        check "bench --isa amx-gemm runs a $t prompt of 48 tokens" \
            'python3 -c "import json,sys; o=json.load(open(sys.argv[1])); assert o[\"isa\"] == \"amx-gemm\" and o[\"prefill_tok_s\"] > 0 and len(o[\"greedy_tokens\"]) >= 4, o" "$tmp/ag.json"'
    done
else
    echo "# skipped the amx-gemm set: this CPU lacks it (AMX-BF16)"
    "$CALDRIX" bench "$M" --isa amx-gemm >/dev/null 2>"$tmp/err"; rc=$?
    check "bench --isa amx-gemm without AMX-BF16 is a usage error naming the sets" '[ $rc -eq 2 ] && grep -q scalar "$tmp/err"'
fi
"$CALDRIX" synth "$tmp/q3.gguf" --shape tiny-qwen3 --type Q8_0 2>/dev/null
"$CALDRIX" bench "$tmp/q3.gguf" -t 2 -p 12 -n 5 -r 2 --json >"$tmp/t.json" 2>/dev/null
check "synth tiny-qwen3 writes a qwen3 model that caldrix bench runs" \
    'positive_json "$tmp/t.json" && grep -q "\"arch\": \"qwen3\"" "$tmp/t.json"'
"$CALDRIX" synth "$tmp/a.gguf" --shape tiny --type Q4_K_M --seed 7 -t 1 2>/dev/null
check "synth is deterministic for a seed whatever the thread count" 'cmp -s "$tmp/a.gguf" "$tmp/tiny-Q4_K_M.gguf"'
"$CALDRIX" synth "$tmp/b.gguf" --shape tiny --type Q4_K_M --seed 8 2>/dev/null
check "another seed gives other weights" '! cmp -s "$tmp/b.gguf" "$tmp/a.gguf"'

# the file itself, read by an independent GGUF parser: metadata, vocabulary, tensor types
# greedy_tokens is what `run --prompt-ids` gives on bench's synthetic ids (the ids llama_bench feeds):
# the last timed run's first prompt is unsalted, so bench/compare-llamacpp compares like with like
ids=$(python3 -c "
s = 0x2545f4914f6cdd1d
out = []
for i in range(24):
    s = (s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    out.append(3 + (s >> 33) % (512 - 3))
print(','.join(map(str, out)))")
"$CALDRIX" bench "$M" -p 24 -n 12 -r 2 --json >"$tmp/g.json" 2>/dev/null
"$CALDRIX" run "$M" --prompt-ids "$ids" -n 12 --temp 0 --ignore-eos --json >"$tmp/r.json" 2>/dev/null
check "bench greedy_tokens equal run --prompt-ids on the same synthetic ids" \
    'python3 -c "import json,sys; a=json.load(open(sys.argv[1]))[\"greedy_tokens\"]; b=json.load(open(sys.argv[2]))[\"tokens\"]; assert len(a)>=12 and a[:12]==b[:12], (a,b)" "$tmp/g.json" "$tmp/r.json"'

python3 - "$tmp/tiny-Q4_K_M.gguf" "$tmp/tiny-F16.gguf" >"$tmp/py.txt" 2>&1 <<'PY'
import struct, sys, math
def read(path):
    b = open(path, "rb").read(); o = 0
    def u(fmt):
        nonlocal o; v = struct.unpack_from("<" + fmt, b, o); o += struct.calcsize(fmt); return v[0]
    def s():
        nonlocal o; n = u("Q"); v = b[o:o + n].decode(); o += n; return v
    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    def val(t):
        if t == 8: return s()
        if t == 9:
            et = u("I"); n = u("Q"); return [val(et) for _ in range(n)]
        return u(sizes[t])
    assert b[:4] == b"GGUF"
    o = 4; ver = u("I"); assert ver == 3; nt = u("Q"); nkv = u("Q")
    kv = {}
    for _ in range(nkv):
        k = s(); kv[k] = val(u("I"))
    ts = {}
    for _ in range(nt):
        name = s(); nd = u("I"); ne = [u("Q") for _ in range(nd)]; ty = u("I"); off = u("Q")
        ts[name] = (ty, ne, off)
    al = kv.get("general.alignment", 32); data = (o + al - 1) // al * al
    return kv, ts, b, data
kv, ts, b, data = read(sys.argv[1])
F32, F16, Q4_K, Q6_K = 0, 1, 12, 14
assert kv["general.architecture"] == "llama" and kv["llama.block_count"] == 2 and kv["llama.embedding_length"] == 256
assert kv["tokenizer.ggml.model"] == "llama" and len(kv["tokenizer.ggml.tokens"]) == 512
toks = kv["tokenizer.ggml.tokens"]
assert toks[:3] == ["<unk>", "<s>", "</s>"] and toks[3] == "<0x00>" and toks[258] == "<0xFF>" and len(set(toks)) == 512
assert kv["tokenizer.ggml.token_type"][:4] == [2, 3, 3, 6] and kv["tokenizer.ggml.bos_token_id"] == 1
assert kv["general.file_type"] == 15                      # LLAMA_FTYPE_MOSTLY_Q4_K_M
# llama.cpp's Q4_K_M rule (llama-quant.cpp): tied embedding -> Q6_K; attn_v and ffn_down -> Q6_K on
# "more bits" layers (i < n/8, i >= 7n/8, (i - n/8) % 3 == 2): with 2 layers, layer 1 only
want = {"token_embd.weight": Q6_K, "blk.0.attn_v.weight": Q4_K, "blk.1.attn_v.weight": Q6_K,
        "blk.0.ffn_down.weight": Q4_K, "blk.1.ffn_down.weight": Q6_K, "blk.0.attn_q.weight": Q4_K,
        "blk.1.ffn_up.weight": Q4_K, "blk.0.attn_norm.weight": F32, "output_norm.weight": F32}
for n, t in want.items():
    assert ts[n][0] == t, (n, ts[n][0], t)
assert "output.weight" not in ts and ts["token_embd.weight"][1] == [256, 512]
assert all(off % 32 == 0 for _, _, off in ts.values())
kv, ts, b, data = read(sys.argv[2])
ty, ne, off = ts["blk.0.ffn_up.weight"]
n = ne[0] * ne[1]
vals = [x for x in struct.unpack_from("<%de" % n, b, data + off)]
mean = sum(vals) / n; sd = math.sqrt(sum((x - mean) ** 2 for x in vals) / n)
assert abs(mean) < 0.002 and abs(sd - 0.02) < 0.001, (mean, sd)
ty, ne, off = ts["blk.1.ffn_norm.weight"]
assert ty == F32 and set(struct.unpack_from("<256f", b, data + off)) == {1.0}
print("python checks passed")
PY
rc=$?
check "synth files carry the vocabulary, llama.cpp's Q4_K_M tensor types and N(0, 0.02) weights (python GGUF reader)" \
    '[ $rc -eq 0 ] || { cat "$tmp/py.txt"; false; }'

# real shapes, from the plan (--list): Llama-3.2-1B Q4_K_M as llama.cpp lays it out
"$CALDRIX" synth --list --shape llama-3.2-1b --type Q4_K_M >"$tmp/plan.txt"
v6=$(grep -E '^blk\.[0-9]+\.attn_v\.weight q6_K' "$tmp/plan.txt" | sed -E 's/^blk\.([0-9]+)\..*/\1/' | tr '\n' ' ')
check "Llama-3.2-1B Q4_K_M: attn_v in Q6_K on layers 0 1 4 7 10 13 14 15 (llama.cpp's rule)" '[ "$v6" = "0 1 4 7 10 13 14 15 " ]'
check "Llama-3.2-1B: 16 layers, 128256 x 2048 Q6_K tied embedding, 8192-wide FFN" \
    'grep -q "^token_embd.weight q6_K 2048 128256 " "$tmp/plan.txt" && grep -q "^blk.15.ffn_down.weight q6_K 8192 2048 " "$tmp/plan.txt" && ! grep -q "^blk.16" "$tmp/plan.txt"'
"$CALDRIX" synth --list --shape qwen3-0.6b --type Q8_0 >"$tmp/plan.txt"
check "Qwen3-0.6B: 28 layers, head_dim 128 (q 2048 x 1024), QK-norm, 151936 vocab, Q8_0 throughout" \
    'grep -q "^blk.27.attn_q.weight q8_0 1024 2048 " "$tmp/plan.txt" && grep -q "^blk.0.attn_k_norm.weight f32 128 1 " "$tmp/plan.txt" && grep -q "^token_embd.weight q8_0 1024 151936 " "$tmp/plan.txt" && ! grep -q "^blk.28" "$tmp/plan.txt"'
"$CALDRIX" synth --list --shape qwen3.5-0.8b --type Q8_0 >"$tmp/plan.txt"
check "Qwen3.5-0.8B: 18 DeltaNet layers (qkv 6144 x 1024, conv f32 4 x 6144) and 6 gated attention layers (q 4096 x 1024)" \
    'grep -q "^blk.0.attn_qkv.weight q8_0 1024 6144 " "$tmp/plan.txt" && grep -q "^blk.0.ssm_conv1d.weight f32 4 6144 " "$tmp/plan.txt" && grep -q "^blk.3.attn_q.weight q8_0 1024 4096 " "$tmp/plan.txt" && [ $(grep -c "ssm_out" "$tmp/plan.txt") = 18 ] && [ $(grep -c "attn_q_norm" "$tmp/plan.txt") = 6 ] && ! grep -q "^blk.24" "$tmp/plan.txt"'
"$CALDRIX" synth "$tmp/q35.gguf" --shape tiny-qwen3.5 --type Q8_0 2>/dev/null
"$CALDRIX" bench "$tmp/q35.gguf" -t 2 -p 300 -n 5 -r 2 --prefix-hit --json >"$tmp/t.json" 2>/dev/null
check "synth tiny-qwen3.5 writes a qwen35 model that caldrix bench runs, its prefix resumed from a state snapshot" \
    'python3 -c "import json,sys; o=json.load(open(sys.argv[1])); assert o[\"arch\"]==\"qwen35\" and o[\"prefill_tok_s\"]>0 and o[\"decode_tok_s\"]>0 and o[\"prefix_cached_tokens\"]==256, o" "$tmp/t.json"'
"$CALDRIX" synth "$tmp/x.gguf" --shape tiny --type IQ2_XXS >/dev/null 2>"$tmp/err"; rc=$?
check "synth refuses a type that needs an importance matrix" '[ $rc -eq 2 ] && grep -q IQ2_XXS "$tmp/err"'
"$CALDRIX" synth "$tmp/x.gguf" --shape gpt5 --type F16 >/dev/null 2>"$tmp/err"; rc=$?
check "synth refuses an unknown shape by name" '[ $rc -eq 2 ] && grep -q gpt5 "$tmp/err"'
"$CALDRIX" synth "$tmp/no/such/dir/x.gguf" --shape tiny --type F16 >/dev/null 2>"$tmp/err"; rc=$?
check "synth into a missing folder exits 1 naming the path" '[ $rc -eq 1 ] && grep -q "no/such/dir" "$tmp/err"'

echo "cli_bench: $pass passed, $fail failed"
[ $fail -eq 0 ]
