#!/usr/bin/env python3
"""Makes tests/golden/families-c.json: PyTorch float32 greedy goldens of the families without a fixture
in ../shared (scripts/goldens/tiny_fixtures.py writes their tiny random-weight checkpoints at test time),
each under the config.json settings listed in VARIANTS. The forward passes below follow transformers'
modeling code line by line (sources named per block); batch size 1, the whole sequence recomputed at every
step (no KV cache), float32 throughout.

  olmo  modular_olmo.py / modeling_olmo.py (OlmoLayerNorm, OlmoAttention, LlamaMLP, LlamaDecoderLayer) and
        configuration_olmo.py, huggingface/transformers @ 00a98e7125fde87191ae8bb9ce137237fd90637b /
        008e574391258935f3ecc3035c882e73bbcac419
  gpt_oss  modeling_gpt_oss.py @ 00d4b3d2142cb4ced2f51b90614b5d26bc045015 (GptOssRMSNorm, GptOssExperts'
        inference branch, GptOssTopKRouter, eager_attention_forward with sinks, _apply_rotary_emb) and
        configuration_gpt_oss.py @ 02b8f42b4240dddea1b27c45d2dc95fb2682f841; YaRN as modeling_rope_utils'
        _compute_yarn_parameters (cos and sin × the attention factor)
  bitnet  modeling_bitnet.py @ 00b676f8f0489b88652a31d70751cc540dd06305 (BitNetRMSNorm, BitNetMLP with its
        ffn_sub_norm, BitNetAttention with its attn_sub_norm before o_proj, LlamaDecoderLayer's order) with every
        linear but lm_head a BitLinear of integrations/bitnet.py @ 0b4060e7f247746bc39eee818a9c6ffe6c6cf892
        (quantization_config bitnet, linear_class bitlinear, offline: unpack_weights of the stored U8 bytes,
        activation_quant's per-token int8 (127 / absmax clamped at 1e-5, round, clamp to [-128, 127]),
        F.linear over the integers, post_quant_process's y / (weight_scale · input_scale)); ACT2FN's relu2
        (ReLUSquaredActivation: square(relu(x))) or silu as hidden_act says

    /usr/bin/python3 scripts/goldens/torch-families-c.py [tests/golden/families-c.json]

(system python with Debian's python3-torch). Deterministic: a rerun writes the same bytes.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_fixtures  # noqa: E402

torch.set_num_threads(1)
TOPK, STEPS, GAP = 5, 16, 0.02
LENGTHS = [("short", 5), ("medium", 20), ("long", 40)]

VARIANTS = [
    ("olmo", "fixture (clip_qkv 1.0)", {}),
    ("olmo", "clip_qkv null", {"clip_qkv": None}),
    ("olmo", "clip_qkv 0.5, 4 kv heads", {"clip_qkv": 0.5, "num_key_value_heads": 4}),
    ("gpt_oss", "fixture (window 8 on layer 0, YaRN, limit 7)", {}),
    ("gpt_oss", "swiglu_limit 0.5, window 4, full layer first", {"swiglu_limit": 0.5, "sliding_window": 4,
                                                                "layer_types": ["full_attention", "sliding_attention"]}),
    ("bitnet", "fixture (relu2, BitLinear offline: packed U8 weights, weight_scale)", {}),
    ("bitnet", "hidden_act silu, 4 kv heads", {"hidden_act": "silu", "num_key_value_heads": 4}),
]


def weights(family, over):
    if family == "bitnet":  # the stored form: U8 packed weights, BF16 weight_scale (to float32 as the model's dtype)
        cfg, ts = tiny_fixtures.tensors(family, over, stored=True)
        W = {}
        for n, s, v, dt in ts:
            if dt == "U8":
                W[n] = torch.tensor(v, dtype=torch.uint8).view(*s)
            else:  # F32, or BF16 values that are exact in bf16
                W[n] = torch.tensor(v, dtype=torch.bfloat16 if dt == "BF16" else torch.float32).view(*s).float()
        return cfg, W
    cfg, ts = tiny_fixtures.tensors(family, over)
    return cfg, {n: torch.tensor(v, dtype=torch.float32).view(*s) for n, s, v in ts}


def unpack_weights(packed, dtype):
    # integrations/bitnet.py unpack_weights: byte row r holds rows r, r + R, r + 2R, r + 3R (R = packed rows)
    R = packed.shape[0]
    unpacked = torch.zeros((R * 4, *packed.shape[1:]), dtype=torch.uint8)
    for i in range(4):
        unpacked[i * R:(i + 1) * R] = (packed & (3 << (2 * i))) >> (2 * i)
    return unpacked.to(dtype) - 1


# unpack_weights' docstring example (integrations/bitnet.py), checked before any golden is written, and the
# fixture's packing (tiny_fixtures.pack_ternary) undone by it
_packed = torch.tensor([[0b10100001, 0b00011000], [0b10010000, 0b00001010]], dtype=torch.uint8)
assert unpack_weights(_packed, torch.float32).tolist() == [[0, -1], [-1, 1], [-1, 1], [-1, 1], [1, 0], [0, -1],
                                                           [1, -1], [1, -1]]
_t = tiny_fixtures.ternary("check", 8, 3)
assert unpack_weights(torch.tensor(tiny_fixtures.pack_ternary(_t, 8, 3), dtype=torch.uint8).view(2, 3),
                      torch.float32).flatten().tolist() == _t


def bitlinear(x, W, name):
    # BitLinear.forward (offline): activation_quant, F.linear over the int8 values, post_quant_process
    w_quant = unpack_weights(W[name + ".weight"], torch.float32)
    scale = 127 / x.abs().max(dim=-1, keepdim=True).values.clamp(min=1e-5)
    input_quant = (x * scale).round().clamp(-128, 127).to(torch.int8)
    y = F.linear(input_quant.to(torch.float32), w_quant)
    return y / (W[name + ".weight_scale"] * scale)


def bitnet_forward(W, cfg, ids):
    E, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = E // nh
    eps = cfg["rms_norm_eps"]
    T = len(ids)

    def rms(x, w):  # BitNetRMSNorm
        variance = x.pow(2).mean(-1, keepdim=True)
        return w * (x * torch.rsqrt(variance + eps))

    act = {"relu2": lambda g: torch.square(F.relu(g)), "silu": F.silu}[cfg["hidden_act"]]
    cos, sin = rope_cos_sin(hd, cfg["rope_theta"], T)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rms(x, W[p + "input_layernorm.weight"])
        q = bitlinear(h, W, p + "self_attn.q_proj").view(T, nh, hd).transpose(0, 1)
        k = bitlinear(h, W, p + "self_attn.k_proj").view(T, nkv, hd).transpose(0, 1)
        v = bitlinear(h, W, p + "self_attn.v_proj").view(T, nkv, hd).transpose(0, 1)
        q = q * cos[None] + rotate_half(q) * sin[None]
        k = k * cos[None] + rotate_half(k) * sin[None]
        a = eager_attention(q, k, v, hd ** -0.5)
        a = rms(a, W[p + "self_attn.attn_sub_norm.weight"])  # BitNetAttention: attn_sub_norm before o_proj
        x = x + bitlinear(a, W, p + "self_attn.o_proj")
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        g = act(bitlinear(h, W, p + "mlp.gate_proj")) * bitlinear(h, W, p + "mlp.up_proj")
        x = x + bitlinear(rms(g, W[p + "mlp.ffn_sub_norm.weight"]), W, p + "mlp.down_proj")  # BitNetMLP
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]  # tied: lm_head stays nn.Linear
    return F.linear(rms(x, W["model.norm.weight"]), head)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(dim, base, T):
    # _compute_default_rope_parameters; LlamaRotaryEmbedding.forward (attention_scaling 1.0)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = (inv_freq[None, :, None].float() @ torch.arange(T)[None, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[0], emb.sin()[0]


def eager_attention(q, k, v, scaling, window=None):
    # eager_attention_forward: repeat_kv, q·kᵀ·scaling + causal (and sliding) mask, f32 softmax, ·v
    nh, T, hd = q.shape
    rep = nh // k.shape[0]
    k = k.repeat_interleave(rep, dim=0)
    v = v.repeat_interleave(rep, dim=0)
    qi, ki = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = ki <= qi
    if window is not None:
        allowed = allowed & (ki > qi - window)
    a = torch.matmul(q, k.transpose(1, 2)) * scaling
    a = a + torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[None]
    a = F.softmax(a, dim=-1, dtype=torch.float32)
    return torch.matmul(a, v).transpose(0, 1).reshape(T, -1)


def olmo_forward(W, cfg, ids):
    E, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = E // nh
    T = len(ids)

    def ln(x):  # OlmoLayerNorm.forward: no weight, no bias, eps 1e-5 whatever the config says
        return F.layer_norm(x.to(torch.float32), (E,), None, None, eps=1e-5)

    def lin(x, name):
        return x @ W[name + ".weight"].t()

    cos, sin = rope_cos_sin(hd, cfg["rope_theta"], T)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = ln(x)  # input_layernorm
        # OlmoAttention.forward
        q, k, v = lin(h, p + "self_attn.q_proj"), lin(h, p + "self_attn.k_proj"), lin(h, p + "self_attn.v_proj")
        c = cfg.get("clip_qkv")
        if c is not None:
            q, k, v = q.clamp(min=-c, max=c), k.clamp(min=-c, max=c), v.clamp(min=-c, max=c)
        q = q.view(T, nh, hd).transpose(0, 1)
        k = k.view(T, nkv, hd).transpose(0, 1)
        v = v.view(T, nkv, hd).transpose(0, 1)
        q = q * cos[None] + rotate_half(q) * sin[None]  # apply_rotary_pos_emb
        k = k * cos[None] + rotate_half(k) * sin[None]
        a = eager_attention(q, k, v, hd ** -0.5)
        x = x + lin(a, p + "self_attn.o_proj")
        h = ln(x)  # post_attention_layernorm
        x = x + lin(F.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    return lin(ln(x), "lm_head")  # model.norm, lm_head


def yarn(cfg):
    # modeling_rope_utils._compute_yarn_parameters (as scripts/goldens/torch-rope-scaling.py transcribes it)
    rs = cfg["rope_scaling"]
    base, dim = cfg["rope_theta"], cfg["head_dim"]
    factor = rs.get("factor")
    attention_factor = rs.get("attention_factor")
    orig = rs.get("original_max_position_embeddings", cfg["max_position_embeddings"])
    if factor is None:
        factor = cfg["max_position_embeddings"] / orig

    def get_mscale(scale, mscale=1):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    if attention_factor is None:
        attention_factor = get_mscale(factor)
    beta_fast = rs.get("beta_fast") or 32
    beta_slow = rs.get("beta_slow") or 1

    def find_correction_dim(num_rotations):
        return (dim * math.log(orig / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = find_correction_dim(beta_fast), find_correction_dim(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extra, inter = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ef = 1 - ramp.to(dtype=torch.float)
    return inter * (1 - ef) + extra * ef, attention_factor


def gpt_oss_forward(W, cfg, ids):
    # modeling_gpt_oss.py: GptOssRMSNorm, GptOssAttention + eager_attention_forward (sinks), GptOssTopKRouter,
    # GptOssExperts (inference branch), GptOssDecoderLayer, GptOssModel, GptOssRotaryEmbedding (YaRN)
    E, nh, nkv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    nx, k, eps = cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["rms_norm_eps"]
    limit, alpha = cfg.get("swiglu_limit", 7.0), cfg.get("swiglu_alpha", 1.702)
    T = len(ids)

    def rms(x, w):
        v = x.pow(2).mean(-1, keepdim=True)
        return w * (x * torch.rsqrt(v + eps))

    def lin(x, name):
        y = x @ W[name + ".weight"].t()
        return y + W[name + ".bias"] if (name + ".bias") in W else y

    inv_freq, att = yarn(cfg)
    freqs = (inv_freq[None, :, None].float() @ torch.arange(T)[None, None, :].float()).transpose(1, 2)[0]
    cos, sin = freqs.cos() * att, freqs.sin() * att  # [T, hd/2]

    def rot(x):  # _apply_rotary_emb
        a, b = torch.chunk(x, 2, dim=-1)
        return torch.cat((a * cos[None] - b * sin[None], b * cos[None] + a * sin[None]), dim=-1)

    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        window = cfg["sliding_window"] if cfg["layer_types"][l] == "sliding_attention" else None
        h = rms(x, W[p + "input_layernorm.weight"])
        q = rot(lin(h, p + "self_attn.q_proj").view(T, nh, hd).transpose(0, 1))
        kk = rot(lin(h, p + "self_attn.k_proj").view(T, nkv, hd).transpose(0, 1))
        v = lin(h, p + "self_attn.v_proj").view(T, nkv, hd).transpose(0, 1)
        rep = nh // nkv
        kk, v = kk.repeat_interleave(rep, dim=0), v.repeat_interleave(rep, dim=0)
        qi, ki = torch.arange(T)[:, None], torch.arange(T)[None, :]
        allowed = ki <= qi
        if window is not None:
            allowed = allowed & (ki > qi - window)
        a = torch.matmul(q, kk.transpose(1, 2)) * hd ** -0.5
        a = a + torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[None]
        sinks = W[p + "self_attn.sinks"].reshape(-1, 1, 1).expand(-1, T, -1)
        comb = torch.cat([a, sinks], dim=-1)
        comb = comb - comb.max(dim=-1, keepdim=True).values
        probs = F.softmax(comb, dim=-1, dtype=comb.dtype)[..., :-1]
        o = torch.matmul(probs, v).transpose(0, 1).reshape(T, -1)
        x = x + lin(o, p + "self_attn.o_proj")
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        # GptOssTopKRouter
        logits = F.linear(h, W[p + "mlp.router.weight"], W[p + "mlp.router.bias"])
        top_v, top_i = torch.topk(logits, k, dim=-1)
        top_v = F.softmax(top_v, dim=1, dtype=top_v.dtype)
        scores = torch.zeros_like(logits).scatter_(1, top_i, top_v)
        # GptOssExperts, inference branch
        hs = h.repeat(nx, 1).view(nx, -1, E)
        gu = torch.bmm(hs, W[p + "mlp.experts.gate_up_proj"]) + W[p + "mlp.experts.gate_up_proj_bias"][..., None, :]
        gate, up = gu[..., ::2], gu[..., 1::2]
        gate = gate.clamp(min=None, max=limit)
        up = up.clamp(min=-limit, max=limit)
        glu = gate * torch.sigmoid(gate * alpha)
        ns = torch.bmm((up + 1) * glu, W[p + "mlp.experts.down_proj"]) + W[p + "mlp.experts.down_proj_bias"][..., None, :]
        ns = ns * scores.transpose(0, 1)[..., None]
        x = x + ns.sum(dim=0)
    return rms(x, W["model.norm.weight"]) @ W["lm_head.weight"].t()


FORWARD = {"olmo": olmo_forward, "gpt_oss": gpt_oss_forward, "bitnet": bitnet_forward}


def greedy(fw, W, cfg, prompt):
    ids, toks, steps, gap = list(prompt), [], [], float("inf")
    for _ in range(STEPS):
        logits = fw(W, cfg, ids)[-1]
        vals, idx = torch.topk(logits, TOPK)
        gap = min(gap, float(vals[0] - vals[1]))
        steps.append({"token": int(idx[0]), "top": [[int(i), float(v)] for i, v in zip(idx, vals)]})
        toks.append(int(idx[0]))
        ids.append(int(idx[0]))
    return toks, steps, gap


def prompt_for(fw, W, cfg, n, seed):
    """The first prompt of n ids (3..vocab-1, from a seeded generator) whose 16 steps keep top-1 and top-2
    at least GAP apart, so float32 rounding cannot change a token."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(200):
        p = torch.randint(3, cfg["vocab_size"], (n,), generator=g).tolist()
        toks, steps, gap = greedy(fw, W, cfg, p)
        if gap >= GAP:
            return p, toks, steps, gap
    raise SystemExit("no prompt of %d ids with a gap of %g" % (n, GAP))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/families-c.json"
    res = []
    for vi, (fam, name, over) in enumerate(VARIANTS):
        cfg, W = weights(fam, over)
        fw = FORWARD[fam]
        cases = []
        for ci, (cname, n) in enumerate(LENGTHS):
            p, toks, steps, gap = prompt_for(fw, W, cfg, n, 1000 * vi + ci)
            cases.append({"name": cname, "prompt_ids": p, "tokens": toks, "steps": steps, "min_gap": gap})
            print("%s / %s / %s: min gap %.4f" % (fam, name, cname, gap), file=sys.stderr)
        res.append({"family": fam, "variant": name, "config": over, "cases": cases})
    with open(out, "w") as f:
        json.dump({"reference": "PyTorch %s float32, transformers' modeling code transcribed in "
                   "scripts/goldens/torch-families-c.py; weights from scripts/goldens/tiny_fixtures.py; %d greedy "
                   "steps, whole sequence recomputed per step" % (torch.__version__, STEPS),
                   "variants": res}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
