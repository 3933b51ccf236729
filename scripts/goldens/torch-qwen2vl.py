#!/usr/bin/env python3
"""Makes tests/golden/qwen2vl.json: PyTorch float32 goldens of Qwen2-VL's and Qwen2.5-VL's text path on the tiny
random-weight checkpoints scripts/goldens/tiny_fixtures.py writes (qwen2_vl: the releases' layout, text keys at the
top level, model.layers.* and visual.*; qwen2_5_vl: transformers >= 4.52's, text_config and
model.language_model.* / model.visual.*), and the multimodal RoPE alone on vectors whose temporal, height and width
positions differ (a text prompt has the three equal, where the sections change nothing: the "rope" cases are what
can tell the sections apart).

The forward pass follows transformers' modeling_qwen2_vl.py line by line (huggingface/transformers @
928b5565ecea2852ac5a41701c90589321548522: Qwen2RMSNorm, Qwen2VLRotaryEmbedding.forward, rotate_half,
apply_multimodal_rotary_pos_emb, Qwen2VLAttention (eager: repeat_kv, q·kᵀ/√d + causal mask, f32 softmax, ·v),
Qwen2MLP, Qwen2VLDecoderLayer, Qwen2VLModel, lm_head; get_rope_index for text only: the three rows of
position_ids are arange(T)); Qwen2.5-VL's text model is the same code (modeling_qwen2_5_vl.py). Config as
configuration_qwen2_vl.py @ 018c8e0394c47749c55861e11f5f7e2a577973d7: rope "mrope" is the default inv_freq
(_compute_default_rope_parameters, attention_scaling 1) and mrope_section splits each half of head_dim.
Batch size 1, the whole sequence recomputed at every step (no KV cache), float32 throughout.

The "bf16" part of the first variant: the same prompts decoded in bfloat16 compute as from_pretrained(torch_dtype=
bfloat16) runs them, by the shared bf16 reference (../shared/tools/fixtures/hf/hf_reference_bf16.py: its cast points
are transformers' Qwen2 ones, which Qwen2-VL's text model shares); its RoPE there is Qwen2VLRotaryEmbedding's: cos and
sin of the three position rows in f32, cast to bf16, then apply_multimodal_rotary_pos_emb's selection (for a text
prompt the rows are equal and this is Qwen2's RoPE), plus one pass at unequal positions.

    /usr/bin/python3 scripts/goldens/torch-qwen2vl.py [tests/golden/qwen2vl.json] [../shared]

(system python with Debian's python3-torch). Deterministic: a rerun writes the same bytes.
"""
import json
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
    ("qwen2_vl", "fixture (top-level keys, rope_scaling type mrope [2, 3, 3], visual.*)", {}),
    ("qwen2_vl", "tie_word_embeddings true (no lm_head, as Qwen2-VL-2B)", {"tie_word_embeddings": True}),
    ("qwen2_5_vl", "text_config, model.language_model.*, mrope_section [4, 2, 2]", {}),
]

# the multimodal RoPE on its own: head_dim, mrope_section, rope_theta, positions (temporal, height, width)
ROPE = [
    (16, [2, 3, 3], 1000000.0, [7, 3, 11]),
    (16, [2, 3, 3], 1000000.0, [0, 40, 2]),
    (16, [4, 2, 2], 10000.0, [31, 5, 200]),
    (16, [2, 3, 3], 1000000.0, [12, 12, 12]),
    (128, [16, 24, 24], 1000000.0, [57, 5, 9]),   # Qwen2-VL-7B's / 2B's head_dim and sections
    (128, [16, 24, 24], 1000000.0, [300, 17, 23]),
]


def weights(family, over):
    cfg, ts = tiny_fixtures.tensors(family, over)
    # the text model's names as Qwen2VLModel's (the 4.52 layout keeps them under model.language_model.)
    W = {n.replace("model.language_model.", "model."): torch.tensor(v, dtype=torch.float32).view(*s)
         for n, s, v in ts}
    text = cfg.get("text_config", cfg)
    return text, W


def default_inv_freq(dim, base):
    # modeling_rope_utils._compute_default_rope_parameters
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def rotary(inv_freq, position_ids):
    # Qwen2VLRotaryEmbedding.forward: position_ids [3, bs, T]; cos, sin [3, bs, T, head_dim]
    inv_freq_expanded = inv_freq[None, None, :, None].float().expand(3, position_ids.shape[1], -1, 1)
    position_ids_expanded = position_ids[:, :, None, :].float()
    freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(2, 3)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * 1.0, emb.sin() * 1.0  # attention_scaling 1.0 (default rope)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    mrope_section = mrope_section * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(mrope_section, dim=-1))], dim=-1).unsqueeze(
        unsqueeze_dim)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(mrope_section, dim=-1))], dim=-1).unsqueeze(
        unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def rms(x, w, eps):
    # Qwen2RMSNorm.forward
    input_dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    return w * x.to(input_dtype)


def forward(W, cfg, ids, position_ids=None):
    E, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, T = E // nh, cfg["rms_norm_eps"], len(ids)
    rs = cfg["rope_scaling"]
    sec = rs["mrope_section"]

    def lin(x, name):
        y = x @ W[name + ".weight"].t()
        return y + W[name + ".bias"] if (name + ".bias") in W else y

    # Qwen2VLForConditionalGeneration.get_rope_index, text only: the three rows arange(T)
    if position_ids is None:
        position_ids = torch.arange(T).view(1, 1, -1).expand(3, 1, -1)
    cos, sin = rotary(default_inv_freq(hd, cfg["rope_theta"]), position_ids)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)][None]  # [1, T, E]
    mask = torch.full((T, T), torch.finfo(torch.float32).min).triu(1)
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rms(x, W[p + "input_layernorm.weight"], eps)
        # Qwen2VLAttention.forward
        q = lin(h, p + "self_attn.q_proj").view(1, T, nh, hd).transpose(1, 2)
        k = lin(h, p + "self_attn.k_proj").view(1, T, nkv, hd).transpose(1, 2)
        v = lin(h, p + "self_attn.v_proj").view(1, T, nkv, hd).transpose(1, 2)
        q, k = apply_multimodal_rotary_pos_emb(q, k, cos, sin, sec)
        k = k.repeat_interleave(nh // nkv, dim=1)  # repeat_kv
        v = v.repeat_interleave(nh // nkv, dim=1)
        a = torch.matmul(q, k.transpose(2, 3)) / (hd ** 0.5)
        a = a + mask
        a = F.softmax(a, dim=-1, dtype=torch.float32).to(q.dtype)
        o = torch.matmul(a, v).transpose(1, 2).reshape(1, T, E)
        x = x + lin(o, p + "self_attn.o_proj")
        h = rms(x, W[p + "post_attention_layernorm.weight"], eps)
        x = x + lin(F.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms(x, W["model.norm.weight"], eps)
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]  # tied
    return (x @ head.t())[0]


def greedy(W, cfg, prompt):
    ids, toks, steps, gap = list(prompt), [], [], float("inf")
    for _ in range(STEPS):
        logits = forward(W, cfg, ids)[-1]
        vals, idx = torch.topk(logits, TOPK)
        gap = min(gap, float(vals[0] - vals[1]))
        steps.append({"token": int(idx[0]), "top": [[int(i), float(v)] for i, v in zip(idx, vals)]})
        toks.append(int(idx[0]))
        ids.append(int(idx[0]))
    return toks, steps, gap


def prompt_for(W, cfg, n, seed):
    """The first prompt of n ids (3..vocab-1, from a seeded generator) whose 16 steps keep top-1 and top-2 at
    least GAP apart, so float32 rounding cannot change a token."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(200):
        p = torch.randint(3, cfg["vocab_size"], (n,), generator=g).tolist()
        toks, steps, gap = greedy(W, cfg, p)
        if gap >= GAP:
            return p, toks, steps, gap
    raise SystemExit("no prompt of %d ids with a gap of %g" % (n, GAP))


def sections_case(W, cfg, prompt):
    """One forward pass over a prompt whose temporal, height and width positions differ (as an image's patches'
    would): every position's top-5 logits."""
    T = len(prompt)
    t = torch.arange(T)
    rows = [t, (t * 7) % 23 + 30, 200 - 5 * t]
    logits = forward(W, cfg, prompt, torch.stack(rows).view(3, 1, T))
    top = []
    for i in range(T):
        vals, idx = torch.topk(logits[i], TOPK)
        top.append([[int(j), float(v)] for j, v in zip(idx, vals)])
    return {"prompt_ids": prompt, "positions": [r.tolist() for r in rows], "top": top}


def rope_case(i, hd, sec, theta, pos):
    g = torch.Generator().manual_seed(77 + i)
    nh = 2
    q = torch.rand((1, nh, 1, hd), generator=g) * 2 - 1   # [bs, heads, T, head_dim]
    k = torch.rand((1, 1, 1, hd), generator=g) * 2 - 1
    position_ids = torch.tensor(pos).view(3, 1, 1)
    cos, sin = rotary(default_inv_freq(hd, theta), position_ids)
    qe, ke = apply_multimodal_rotary_pos_emb(q, k, cos, sin, list(sec))
    return {"head_dim": hd, "mrope_section": sec, "rope_theta": theta, "positions": pos, "n_heads": nh,
            "inv_freq": default_inv_freq(hd, theta).tolist(),
            "q": q.flatten().tolist(), "q_rotated": qe.flatten().tolist(),
            "k": k.flatten().tolist(), "k_rotated": ke.flatten().tolist()}


NEAR_TIE, LOGIT_TOL_BF16 = 0.05, 0.25  # as ../shared/tools/fixtures/hf/make_hf_bf16.py states them


def bf16_part(W, cfg, cases, sc):
    import hf_reference_bf16 as R
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    sec = cfg["rope_scaling"]["mrope_section"]
    rows = {"pos": None}

    def mrope_cos_sin_bf16(c, T, hi=False):
        # Qwen2VLRotaryEmbedding.forward (cos/sin .to(bf16)) then apply_multimodal_rotary_pos_emb's selection
        pid = rows["pos"] if rows["pos"] is not None else torch.arange(T).view(1, 1, -1).expand(3, 1, -1)
        cos, sin = rotary(default_inv_freq(hd, cfg["rope_theta"]), pid)
        cos, sin = cos.to(torch.bfloat16), sin.to(torch.bfloat16)
        sel = lambda t: torch.cat([m[i % 3] for i, m in enumerate(t.split(list(sec) * 2, dim=-1))], dim=-1)[0]
        return sel(cos), sel(sin)

    R.cos_sin_bf16 = mrope_cos_sin_bf16
    rcfg = {**cfg, "model_type": "qwen2", "rope_scaling": None, "use_sliding_window": False}
    Wb = R.cast_weights({k: v for k, v in W.items() if not k.startswith("visual.")})
    out = []
    for c in cases:
        toks, recs = R.run(Wb, rcfg, c["prompt_ids"], steps=STEPS, topk=TOPK)
        out.append({"name": c["name"], "prompt_ids": c["prompt_ids"], "tokens": toks,
                    "steps": [{"token": r["token"], "top": r["top"], "near_tie": r["gap"] < NEAR_TIE} for r in recs]})
        print("bf16 %s: min gap %.4f" % (c["name"], min(r["gap"] for r in recs)), file=sys.stderr)
    rows["pos"] = torch.tensor(sc["positions"]).view(3, 1, -1)
    logits = R.forward(Wb, rcfg, sc["prompt_ids"]).to(torch.float32)
    rows["pos"] = None
    top = []
    for i in range(logits.shape[0]):
        _, t, _ = R.pick(logits[i], TOPK)
        top.append(t)
    return {"logit_tolerance": LOGIT_TOL_BF16, "near_tie_threshold": NEAR_TIE, "cases": out,
            "sections": {"prompt_ids": sc["prompt_ids"], "positions": sc["positions"], "top": top}}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/qwen2vl.json"
    shared = sys.argv[2] if len(sys.argv) > 2 else "../shared"
    sys.path.insert(0, os.path.join(shared, "tools/fixtures/hf"))
    res = []
    for vi, (fam, name, over) in enumerate(VARIANTS):
        cfg, W = weights(fam, over)
        cases = []
        for ci, (cname, n) in enumerate(LENGTHS):
            p, toks, steps, gap = prompt_for(W, cfg, n, 1000 * vi + ci)
            cases.append({"name": cname, "prompt_ids": p, "tokens": toks, "steps": steps, "min_gap": gap})
            print("%s / %s / %s: min gap %.4f" % (fam, name, cname, gap), file=sys.stderr)
        res.append({"family": fam, "variant": name, "config": over, "cases": cases,
                    "sections": sections_case(W, cfg, cases[1]["prompt_ids"])})
        if vi == 0:
            res[-1]["bf16"] = bf16_part(W, cfg, cases, res[-1]["sections"])
    rope = [rope_case(i, *r) for i, r in enumerate(ROPE)]
    with open(out, "w") as f:
        json.dump({"reference": "PyTorch %s float32, transformers' modeling_qwen2_vl.py transcribed in "
                   "scripts/goldens/torch-qwen2vl.py; weights from scripts/goldens/tiny_fixtures.py; %d greedy "
                   "steps, whole sequence recomputed per step; rope: apply_multimodal_rotary_pos_emb on random "
                   "vectors at temporal/height/width positions" % (torch.__version__, STEPS),
                   "variants": res, "rope": rope}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
