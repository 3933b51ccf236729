#!/usr/bin/env python3
"""Tiny random-weight Hugging Face checkpoints for the families that have no fixture in ../shared
(OLMo v1, GPT-OSS, BitNet b1.58, Qwen2-VL and Qwen2.5-VL), written at test time: config.json (the keys published checkpoints write) and
model.safetensors (float32, transformers' tensor names). Python's standard library only, so the tests
need no PyTorch; deterministic: the same family always gives the same bytes.

Weights: element i of tensor NAME is u·scale with u = (z >> 40) / 2^23 - 1 in [-1, 1), z the
splitmix64 output of state fnv1a64(NAME) + (i + 1)·0x9E3779B97F4A7C15 (exact in float32, since scale is a
power of two).

BitNet's linears are stored as microsoft/bitnet-b1.58-2B-4T stores them (quantization_config bitnet, BitLinear,
offline): "weight" U8 [rows/4, cols], four ternary values a byte (transformers' integrations/bitnet.py
pack_weights: value t of row i·rows/4 + r at bits 2i of byte row r, stored as t + 1), and "weight_scale" BF16
[1] (the divisor: y = x_int8·t / (weight_scale · 127/absmax(x))). t is -1, 0, +1 as u < -1/3, |u| <= 1/3,
u > 1/3; weight_scale is 4 + round(16·(u + 1))/8 (exact in bf16).

    python3 scripts/goldens/tiny_fixtures.py FAMILY OUT_DIR [JSON_CONFIG_OVERRIDES]

scripts/goldens/torch-families-c.py and torch-qwen2vl.py read the same tensors to make the PyTorch goldens.
"""
import json
import os
import struct
import sys

M64 = (1 << 64) - 1


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001B3) & M64
    return h


def values(name, n, scale):
    st = fnv1a64(name)
    out = [0.0] * n
    for i in range(n):
        z = (st + (i + 1) * 0x9E3779B97F4A7C15) & M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        out[i] = ((z >> 40) / 8388608.0 - 1.0) * scale
    return out


def olmo(over):
    cfg = {"architectures": ["OlmoForCausalLM"], "model_type": "olmo", "vocab_size": 320, "hidden_size": 64,
           "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "hidden_act": "silu", "max_position_embeddings": 256, "rope_theta": 10000.0, "rope_scaling": None,
           "attention_bias": False, "attention_dropout": 0.0, "clip_qkv": 1.0, "tie_word_embeddings": False,
           "pad_token_id": 1, "bos_token_id": None, "eos_token_id": 2, "torch_dtype": "float32",
           "initializer_range": 0.02, "use_cache": True}
    cfg.update(over)
    E, F, H, L, V = (cfg[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                      "num_hidden_layers", "vocab_size"))
    KV = cfg["num_key_value_heads"] or H
    hd = E // H
    t = [("model.embed_tokens.weight", (V, E), 1.0)]
    for l in range(L):
        p = "model.layers.%d." % l
        t += [(p + "self_attn.q_proj.weight", (H * hd, E), 0.25), (p + "self_attn.k_proj.weight", (KV * hd, E), 0.25),
              (p + "self_attn.v_proj.weight", (KV * hd, E), 0.25), (p + "self_attn.o_proj.weight", (E, H * hd), 0.125),
              (p + "mlp.gate_proj.weight", (F, E), 0.25), (p + "mlp.up_proj.weight", (F, E), 0.25),
              (p + "mlp.down_proj.weight", (E, F), 0.125)]
    t.append(("lm_head.weight", (V, E), 0.25))
    return cfg, t


def gpt_oss(over):
    cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": 320, "hidden_size": 64,
           "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "hidden_act": "silu", "max_position_embeddings": 256, "rope_theta": 150000.0,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                            "truncate": False, "original_max_position_embeddings": 64},
           "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"], "attention_bias": True,
           "attention_dropout": 0.0, "num_local_experts": 4, "num_experts_per_tok": 2, "experts_per_token": 2,
           "swiglu_limit": 7.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "router_aux_loss_coef": 0.9,
           "output_router_logits": False, "initial_context_length": 64, "pad_token_id": 1, "eos_token_id": 2,
           "torch_dtype": "float32", "initializer_range": 0.02, "use_cache": True}
    cfg.update(over)
    E, I, H, KV, L, V, X = (cfg[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                             "num_key_value_heads", "num_hidden_layers", "vocab_size",
                                             "num_local_experts"))
    hd = cfg["head_dim"]
    t = [("model.embed_tokens.weight", (V, E), 1.0), ("model.norm.weight", (E,), 1.0), ("lm_head.weight", (V, E), 0.25)]
    for l in range(L):
        p = "model.layers.%d." % l
        t += [(p + "input_layernorm.weight", (E,), 1.0), (p + "post_attention_layernorm.weight", (E,), 1.0),
              (p + "self_attn.q_proj.weight", (H * hd, E), 0.25), (p + "self_attn.q_proj.bias", (H * hd,), 0.25),
              (p + "self_attn.k_proj.weight", (KV * hd, E), 0.25), (p + "self_attn.k_proj.bias", (KV * hd,), 0.25),
              (p + "self_attn.v_proj.weight", (KV * hd, E), 0.25), (p + "self_attn.v_proj.bias", (KV * hd,), 0.25),
              (p + "self_attn.o_proj.weight", (E, H * hd), 0.125), (p + "self_attn.o_proj.bias", (E,), 0.25),
              (p + "self_attn.sinks", (H,), 2.0),
              (p + "mlp.router.weight", (X, E), 0.5), (p + "mlp.router.bias", (X,), 0.5),
              (p + "mlp.experts.gate_up_proj", (X, E, 2 * I), 0.25), (p + "mlp.experts.gate_up_proj_bias", (X, 2 * I), 0.5),
              (p + "mlp.experts.down_proj", (X, I, E), 0.25), (p + "mlp.experts.down_proj_bias", (X, E), 0.25)]
    return cfg, t


def bitnet(over):
    # microsoft/bitnet-b1.58-2B-4T's config.json keys (shrunk); BitNetConfig's defaults where it writes none
    cfg = {"architectures": ["BitNetForCausalLM"], "model_type": "bitnet", "vocab_size": 320, "hidden_size": 64,
           "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "hidden_act": "relu2", "max_position_embeddings": 256, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
           "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": True, "bos_token_id": 1,
           "eos_token_id": 2, "torch_dtype": "bfloat16", "initializer_range": 0.02, "use_cache": True,
           "quantization_config": {"linear_class": "bitlinear", "quant_method": "bitnet",
                                   "quantization_mode": "offline"}}
    cfg.update(over)
    E, F, H, L, V = (cfg[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                      "num_hidden_layers", "vocab_size"))
    KV = cfg["num_key_value_heads"] or H
    hd = E // H
    t = [("model.embed_tokens.weight", (V, E), 1.0), ("model.norm.weight", (E,), 1.0)]
    for l in range(L):
        p = "model.layers.%d." % l
        t += [(p + "input_layernorm.weight", (E,), 1.0), (p + "post_attention_layernorm.weight", (E,), 1.0),
              (p + "self_attn.attn_sub_norm.weight", (E,), 1.0), (p + "mlp.ffn_sub_norm.weight", (F,), 1.0)]
        for name, shape in (("self_attn.q_proj", (H * hd, E)), ("self_attn.k_proj", (KV * hd, E)),
                            ("self_attn.v_proj", (KV * hd, E)), ("self_attn.o_proj", (E, H * hd)),
                            ("mlp.gate_proj", (F, E)), ("mlp.up_proj", (F, E)), ("mlp.down_proj", (E, F))):
            t += [(p + name + ".weight", shape, "ternary"), (p + name + ".weight_scale", (1,), "wscale")]
    if not cfg["tie_word_embeddings"]:
        t.append(("lm_head.weight", (V, E), 0.25))
    return cfg, t


def _qwen2vl_text(cfg, prefix):
    """Qwen2-VL's text model (Qwen2's decoder: q/k/v biases) under prefix, lm_head unless tied."""
    E, F, H, KV, L, V = (cfg[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                          "num_key_value_heads", "num_hidden_layers", "vocab_size"))
    hd = E // H
    t = [(prefix + "embed_tokens.weight", (V, E), 1.0), (prefix + "norm.weight", (E,), 1.0)]
    for l in range(L):
        p = prefix + "layers.%d." % l
        t += [(p + "input_layernorm.weight", (E,), 1.0), (p + "post_attention_layernorm.weight", (E,), 1.0),
              (p + "self_attn.q_proj.weight", (H * hd, E), 0.25), (p + "self_attn.q_proj.bias", (H * hd,), 0.5),
              (p + "self_attn.k_proj.weight", (KV * hd, E), 0.25), (p + "self_attn.k_proj.bias", (KV * hd,), 0.5),
              (p + "self_attn.v_proj.weight", (KV * hd, E), 0.25), (p + "self_attn.v_proj.bias", (KV * hd,), 0.5),
              (p + "self_attn.o_proj.weight", (E, H * hd), 0.125),
              (p + "mlp.gate_proj.weight", (F, E), 0.25), (p + "mlp.up_proj.weight", (F, E), 0.25),
              (p + "mlp.down_proj.weight", (E, F), 0.125)]
    if not cfg.get("tie_word_embeddings"):
        t.append(("lm_head.weight", (V, E), 0.25))
    return t


def _visual(prefix):
    """A few of the vision tower's tensors (a real checkpoint has them; the text path never reads them)."""
    return [(prefix + "patch_embed.proj.weight", (16, 3, 2, 2, 2), 0.25),
            (prefix + "blocks.0.attn.qkv.weight", (48, 16), 0.25), (prefix + "blocks.0.attn.qkv.bias", (48,), 0.25),
            (prefix + "merger.ln_q.weight", (16,), 1.0), (prefix + "merger.mlp.0.weight", (64, 64), 0.25),
            (prefix + "merger.mlp.2.weight", (64, 64), 0.25)]


QWEN2VL_TEXT = {"vocab_size": 320, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu",
                "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 2,
                "attention_dropout": 0.0, "tie_word_embeddings": False, "initializer_range": 0.02,
                "bos_token_id": 1, "eos_token_id": 2, "use_cache": True}
QWEN2VL_VISION = {"depth": 1, "embed_dim": 16, "hidden_size": 64, "hidden_act": "quick_gelu", "mlp_ratio": 4,
                  "num_heads": 2, "in_channels": 3, "patch_size": 2, "spatial_merge_size": 2,
                  "temporal_patch_size": 2}


def qwen2_vl(over):
    """Qwen2VLForConditionalGeneration as the Qwen2-VL releases write it (transformers 4.45): the text keys at the
    top level, rope_scaling {"type": "mrope", "mrope_section"}, model.layers.* and visual.*."""
    cfg = {"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl", **QWEN2VL_TEXT,
           "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}, "vision_config": QWEN2VL_VISION,
           "image_token_id": 300, "video_token_id": 301, "vision_start_token_id": 302, "vision_end_token_id": 303,
           "torch_dtype": "float32"}
    cfg.update(over)
    return cfg, _qwen2vl_text(cfg, "model.") + _visual("visual.")


def qwen2_5_vl(over):
    """Qwen2_5_VLForConditionalGeneration as transformers >= 4.52 saves it: the text model in text_config (rope_scaling
    {"rope_type": "default", "mrope_section"}), its tensors under model.language_model., the tower's under
    model.visual. over: keys of text_config."""
    tc = {**QWEN2VL_TEXT, "model_type": "qwen2_5_vl_text",
          "rope_scaling": {"rope_type": "default", "type": "default", "mrope_section": [4, 2, 2]}}
    tc.update(over)
    cfg = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl", "text_config": tc,
           "vision_config": {**QWEN2VL_VISION, "fullatt_block_indexes": [0], "window_size": 4, "out_hidden_size": 64,
                             "intermediate_size": 32},
           "image_token_id": 300, "video_token_id": 301, "vision_start_token_id": 302, "vision_end_token_id": 303,
           "tie_word_embeddings": tc.get("tie_word_embeddings", False), "torch_dtype": "float32"}
    return cfg, _qwen2vl_text(tc, "model.language_model.") + _visual("model.visual.")


def ternary(name, rows, cols):
    """The ternary matrix [rows][cols] of tensor name (row-major, values -1, 0, 1)."""
    return [-1 if u < -1.0 / 3 else 1 if u > 1.0 / 3 else 0 for u in values(name, rows * cols, 1.0)]


def pack_ternary(t, rows, cols):
    """transformers' pack_weights: [rows/4][cols] bytes, row i·rows/4 + r of t at bits 2i of byte row r."""
    rd = rows // 4
    out = [0] * (rd * cols)
    for i in range(4):
        for r in range(rd):
            for c in range(cols):
                out[r * cols + c] |= (t[(i * rd + r) * cols + c] + 1) << (2 * i)
    return out


FAMILIES = {"olmo": olmo, "gpt_oss": gpt_oss, "bitnet": bitnet, "qwen2_vl": qwen2_vl, "qwen2_5_vl": qwen2_5_vl}


def tensors(family, cfg_over=None, stored=False):
    """(config dict, [(name, shape, flat values)]) of a family; stored: [(name, shape, flat values, dtype)] as the
    file holds them (BitNet's linears packed U8 [rows/4, cols] and their BF16 weight_scale), else every tensor as
    the values transformers computes with (the ternary matrices unpacked, -1/0/1)."""
    cfg, spec = FAMILIES[family](cfg_over or {})
    out = []
    for name, shape, scale in spec:
        n = 1
        for d in shape:
            n *= d
        if scale == "ternary":
            t = ternary(name, shape[0], shape[1])
            out.append((name, (shape[0] // 4, shape[1]), pack_ternary(t, shape[0], shape[1]), "U8") if stored
                       else (name, shape, [float(v) for v in t], "F32"))
        elif scale == "wscale":
            out.append((name, shape, [4.0 + round(16 * (values(name, 1, 1.0)[0] + 1)) / 8.0],
                        "BF16" if stored else "F32"))
        else:
            out.append((name, shape, values(name, n, scale), "F32"))
    return cfg, out if stored else [x[:3] for x in out]


def write(family, folder, cfg_over=None):
    cfg, ts = tensors(family, cfg_over, stored=True)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    ts = sorted(ts, key=lambda x: x[0])
    size = {"F32": 4, "BF16": 2, "U8": 1}
    head, off = {}, 0
    for name, shape, v, dt in ts:
        head[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + size[dt] * len(v)]}
        off += size[dt] * len(v)
    head["__metadata__"] = {"format": "pt"}
    hb = json.dumps(head, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for _, _, v, dt in ts:
            if dt == "U8":
                f.write(bytes(v))
            elif dt == "BF16":  # exact: the values have at most 8 significant bits
                f.write(b"".join(struct.pack("<f", x)[2:] for x in v))
            else:
                f.write(struct.pack("<%df" % len(v), *v))


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in FAMILIES:
        sys.exit("usage: tiny_fixtures.py {%s} OUT_DIR [JSON_CONFIG_OVERRIDES]" % ",".join(FAMILIES))
    write(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]) if len(sys.argv) > 3 else None)
