#!/usr/bin/env bash
# The LayerNorm families (StableLM, Starcoder2, Cohere), and Granite, OLMo 2, SmolLM3, Mixtral, Qwen2-MoE and Granite MoE, as GGUF: `caldrix convert` of each fixture (../shared/fixtures/hf/NAME; Starcoder2's
# with "sliding_window": null, as llama.cpp's starcoder2 has no window) and `caldrix quantize` of it to
# Q8_0 give the files whose sha256 tests/golden/families-ln-llamacpp.json pins, and caldrix's 16 greedy
# tokens on each equal llama.cpp's on the same file (node-llama-cpp 3.21.1,
# scripts/goldens/llamacpp-families-ln.mjs); a step whose llama.cpp top-two gap is under 0.02 ends the
# comparison of its case (said). The files carry llama.cpp's keys.
set -u
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
HF=../shared/fixtures/hf
# families-b-llamacpp.json: granite, olmo2, smollm3, mixtral, qwen2_moe and granitemoe the same way (llamacpp-families-ln.mjs --set b)
GS="tests/golden/families-ln-llamacpp.json tests/golden/families-b-llamacpp.json"

cat >"$tmp/cmp.py" <<'PY'
import json, sys
g = json.load(open(sys.argv[1])); name, typ, outs = sys.argv[2], sys.argv[3], sys.argv[4]
m = [x for x in g['models'] if x['name'] == name and x['type'] == typ][0]
msgs = []; bad = 0
for i, c in enumerate(m['cases']):
    o = json.load(open(outs + str(i)))['tokens']
    for s, (a, b) in enumerate(zip(o, c['tokens'])):
        if a != b:
            if c['top2_logit_gap'][s] < 0.02:
                msgs.append('case %d: equal up to step %d, where llama.cpp\'s top two are %.3g apart' % (i, s, c['top2_logit_gap'][s]))
            else:
                bad += 1; msgs.append('case %d step %d: %d, llama.cpp %d (gap %.3g)' % (i, s, a, b, c['top2_logit_gap'][s]))
            break
    else:
        if len(o) != len(c['tokens']): bad += 1; msgs.append('case %d: %d tokens' % (i, len(o)))
print('; '.join(msgs) if msgs else 'all %d cases equal' % len(m['cases']))
sys.exit(1 if bad else 0)
PY
run_cases() { # FILE NAME TYPE
    local i=0
    for ids in $(python3 -c "import json,sys; g=json.load(open('$G')); [print(','.join(map(str,c['prompt_ids']))) for c in [m for m in g['models'] if m['name']=='$2' and m['type']=='$3'][0]['cases']]"); do
        "$CALDRIX" run "$1" --prompt-ids "$ids" -n 16 --temp 0 --ignore-eos --json --top-logits 8 --threads 1 \
            >"$tmp/o.json$i" 2>"$tmp/err" || { cat "$tmp/err"; return 1; }
        i=$((i+1))
    done
}
sha() { python3 -c "import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())" "$1"; }
pinned() { python3 -c "import json; g=json.load(open('$G')); print([m for m in g['models'] if m['name']=='$1' and m['type']=='$2'][0]['sha256'])"; }

for G in $GS; do
for m in $(python3 -c "import json; print(' '.join(sorted(set(x['name'] for x in json.load(open('$G'))['models']))))"); do
    dir=$HF/$m
    over=$(python3 -c "import json; g=json.load(open('$G')); print(json.dumps([x for x in g['models'] if x['name']=='$m'][0]['config']))")
    if [ "$over" != "{}" ]; then # the fixture's weights under other config.json keys (a folder of the same name)
        dir="$tmp/src/$m"; mkdir -p "$dir"
        python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c.update(json.loads(sys.argv[2])); json.dump(c, open(sys.argv[3], 'w'))" \
            "$HF/$m/config.json" "$over" "$dir/config.json"
        ln -s "$(cd "$HF/$m" && pwd)/model.safetensors" "$dir/model.safetensors"
    fi
    f32="$tmp/$m-F32.gguf"; q8="$tmp/$m-Q8_0.gguf"
    if ! "$CALDRIX" convert "$dir" "$f32" --type F32 2>"$tmp/conv" || ! "$CALDRIX" quantize "$f32" "$q8" Q8_0 >/dev/null 2>>"$tmp/conv"; then
        bad "$m: convert and quantize"; cat "$tmp/conv"; continue
    fi
    for t in F32 Q8_0; do
        f="$tmp/$m-$t.gguf"
        if [ "$(sha "$f")" != "$(pinned $m $t)" ]; then
            bad "$m $t: the file is the one llama.cpp's tokens were made on (sha256 $(sha "$f"))"; continue
        fi
        if run_cases "$f" $m $t && r=$(python3 "$tmp/cmp.py" "$G" $m $t "$tmp/o.json"); then
            ok "$m $t ($over): llama.cpp's greedy tokens on the same file ($r)"
        else bad "$m $t: llama.cpp's greedy tokens (${r:-run failed})"; fi
    done
done
done

# llama.cpp's keys (gguf-py's names) in the converted files
python3 - "$tmp" <<'PY' && ok "the files carry llama.cpp's keys (layer_norm_epsilon, rope.dimension_count, norm biases, logit_scale; granitemoe's experts)" || bad "the files carry llama.cpp's keys"
import os, struct, sys
def kv(path):
    d = open(path, 'rb').read(); o = [8]
    def u(f):
        v = struct.unpack_from('<' + f, d, o[0])[0]; o[0] += struct.calcsize('<' + f); return v
    def s():
        n = u('Q'); v = d[o[0]:o[0] + n]; o[0] += n; return v.decode()
    def val(t):
        if t == 8: return s()
        if t == 9:
            et = u('I'); n = u('Q'); return [val(et) for _ in range(n)]
        return u({0:'B',1:'b',2:'H',3:'h',4:'I',5:'i',6:'f',7:'?',10:'Q',11:'q',12:'d'}[t])
    nt = u('Q'); nk = u('Q'); r = {}
    for _ in range(nk):
        k = s(); r[k] = val(u('I'))
    return r, d
t = sys.argv[1]
if os.path.exists(t + '/stablelm-F32.gguf'):
    g, d = kv(t + '/stablelm-F32.gguf')
    assert g['general.architecture'] == 'stablelm' and g['stablelm.rope.dimension_count'] == 4
    assert abs(g['stablelm.attention.layer_norm_epsilon'] - 1e-5) < 1e-9 and g['stablelm.use_parallel_residual'] is False
    assert b'output_norm.bias' in d and b'blk.0.attn_q.bias' in d and b'blk.0.ffn_norm.bias' in d
if os.path.exists(t + '/starcoder2-F32.gguf'):
    g, d = kv(t + '/starcoder2-F32.gguf')
    assert g['general.architecture'] == 'starcoder2' and 'starcoder2.attention.sliding_window' not in g
    assert b'blk.0.attn_output.bias' in d and b'blk.0.ffn_up.bias' in d and b'blk.0.ffn_gate.weight' not in d
if os.path.exists(t + '/cohere-F32.gguf'):
    g, d = kv(t + '/cohere-F32.gguf')
    assert g['general.architecture'] == 'command-r' and g['command-r.logit_scale'] == 0.25
    assert abs(g['command-r.attention.layer_norm_epsilon'] - 1e-5) < 1e-9 and b'output_norm.bias' not in d
if os.path.exists(t + '/granitemoe-F32.gguf'):
    # GraniteMoeModel(GraniteModel(LlamaModel)).set_gguf_parameters: TextModel's keys with the experts',
    # LlamaModel's vocab_size and rope.dimension_count, Granite's four scalings; nothing else
    g, d = kv(t + '/granitemoe-F32.gguf')
    a = {k[len('granitemoe.'):]: v for k, v in g.items() if k.startswith('granitemoe.')}
    assert g['general.architecture'] == 'granitemoe' and sorted(a) == sorted([
        'block_count', 'context_length', 'embedding_length', 'feed_forward_length', 'attention.head_count',
        'attention.head_count_kv', 'rope.freq_base', 'attention.layer_norm_rms_epsilon', 'expert_count',
        'expert_used_count', 'vocab_size', 'rope.dimension_count', 'attention.scale', 'embedding_scale',
        'residual_scale', 'logit_scale']), sorted(a)
    assert (a['expert_count'], a['expert_used_count'], a['rope.dimension_count']) == (8, 2, 16)
    assert (a['attention.scale'], a['embedding_scale'], a['logit_scale']) == (0.0625, 12.0, 6.0)
    # input_linear split into gate and up (in that order), output_linear the down experts, the router ffn_gate_inp
    i = [d.find(b'blk.0.' + n + b'.weight') for n in (b'ffn_gate_exps', b'ffn_up_exps', b'ffn_down_exps', b'ffn_gate_inp')]
    assert min(i) > 0 and i == sorted(i) and b'input_linear' not in d and b'output_linear' not in d and b'shexp' not in d
PY

# llama.cpp's granitemoe also reads Granite MoE Shared (expert_shared_feed_forward_length and an ungated
# ffn_{gate,up,down}_shexp); caldrix does not run that expert, and says so by the key rather than by a tensor
if [ -f "$tmp/granitemoe-F32.gguf" ]; then
    python3 - "$tmp/granitemoe-F32.gguf" "$tmp/shexp.gguf" <<'PY'
import struct, sys
d = open(sys.argv[1], 'rb').read(); o = 24
def skip_val(t):
    global o
    if t == 8: o += 8 + struct.unpack_from('<Q', d, o)[0]
    elif t == 9:
        et, n = struct.unpack_from('<IQ', d, o); o += 12
        for _ in range(n): skip_val(et)
    else: o += {0:1,1:1,2:2,3:2,4:4,5:4,6:4,7:1,10:8,11:8,12:8}[t]
nt, nk = struct.unpack_from('<QQ', d, 8)
for _ in range(nk):
    o += 8 + struct.unpack_from('<Q', d, o)[0]; t = struct.unpack_from('<I', d, o)[0]; o += 4; skip_val(t)
kv_end = o
for _ in range(nt):
    o += 8 + struct.unpack_from('<Q', d, o)[0]; nd = struct.unpack_from('<I', d, o)[0]; o += 4 + 8 * nd + 4 + 8
data = (o + 31) // 32 * 32
k = b'granitemoe.expert_shared_feed_forward_length'
head = d[:16] + struct.pack('<Q', nk + 1) + d[24:kv_end] + struct.pack('<Q', len(k)) + k + struct.pack('<II', 4, 32) + d[kv_end:o]
open(sys.argv[2], 'wb').write(head + bytes(-len(head) % 32) + d[data:])
PY
    "$CALDRIX" run "$tmp/shexp.gguf" --prompt-ids 1,2,3 -n 1 --temp 0 >/dev/null 2>"$tmp/err"; rc=$?
    if [ $rc -ne 0 ] && grep -q "granitemoe.expert_shared_feed_forward_length is 32: a shared expert" "$tmp/err"; then
        ok "a granitemoe file with a shared expert (Granite MoE Shared) is refused by its key (exit $rc)"
    else bad "a granitemoe file with a shared expert is refused by its key (exit $rc: $(cat "$tmp/err"))"; fi
fi

echo "families_ln_gguf: $pass passed, $fail failed"
[ $fail -eq 0 ]
