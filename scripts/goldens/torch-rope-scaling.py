#!/usr/bin/env python3
"""Makes tests/golden/rope-scaling.json: PyTorch float32 greedy goldens of the llama fixture's weights
(../shared/fixtures/hf/llama: head_dim 16) under rope_scaling kinds the fixtures do not use ("yarn",
"linear", "dynamic", "longrope" on a Llama), with max_position_embeddings / original_max_position_embeddings
small enough (16) that the prompts (20 and 40 ids) pass them and the scaling matters.

The forward pass is the fixtures' own reference, shared/tools/fixtures/hf/hf_reference.py (transformers'
modeling_llama.py line by line); this script replaces its cos/sin by transformers' scaled ones, transcribed
from modeling_rope_utils.py (v5: _compute_yarn_parameters, _compute_dynamic_ntk_parameters,
_compute_longrope_parameters, dynamic_rope_update) and LlamaRotaryEmbedding.forward (cos/sin x
attention_scaling):

  linear    inv_freq / factor (_compute_linear_scaling_rope_parameters), attention factor 1.
  yarn      inv_freq and attention factor fixed (factor as given; an absent one is max / original).
  dynamic   what generate() with transformers' cache computes: the prompt in one pass at seq_len = its
            length, then each generated token in a pass of its own at seq_len = position + 1, the cached
            keys kept (so position p is rotated with the frequencies of the pass that computed it).
  longrope  the whole sequence recomputed at every step (Phi3ForCausalLM drops its cache when the length
            passes original_max_position_embeddings), every position with the set of seq_len = length.

    /usr/bin/python3 scripts/goldens/torch-rope-scaling.py ../shared [tests/golden/rope-scaling.json]

(system python with Debian's python3-torch; transformers is not installed). Deterministic.
"""
import json
import math
import os
import sys

import torch

shared = sys.argv[1] if len(sys.argv) > 1 else "../shared"
out = sys.argv[2] if len(sys.argv) > 2 else "tests/golden/rope-scaling.json"
sys.path.insert(0, os.path.join(shared, "tools/fixtures/hf"))
torch.set_num_threads(1)

import hf_reference as R  # noqa: E402
import make_hf as M  # noqa: E402

STEPS = 8
LONG = [1.0, 1.2, 1.5, 2.0, 3.0, 4.5, 6.0, 8.0]
SHORT = [1.0, 1.01, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12]
VARIANTS = [
    ("yarn factor 4", {"max_position_embeddings": 64,
                       "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}}),
    ("yarn attention_factor, betas", {"max_position_embeddings": 64,
                                      "rope_scaling": {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16,
                                                       "attention_factor": 1.3, "beta_fast": 8, "beta_slow": 2}}),
    ("yarn mscale / mscale_all_dim", {"max_position_embeddings": 64,
                                      "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                                       "mscale": 1.0, "mscale_all_dim": 0.5}}),
    ("dynamic factor 2", {"max_position_embeddings": 16, "rope_scaling": {"type": "dynamic", "factor": 2.0}}),
    ("linear factor 4", {"max_position_embeddings": 64, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}),
    ("longrope on a Llama", {"max_position_embeddings": 64,
                             "rope_scaling": {"rope_type": "longrope", "original_max_position_embeddings": 16,
                                              "short_factor": SHORT, "long_factor": LONG}}),
]


def dim_of(cfg):
    return int(R.head_dim_of(cfg) * cfg.get("partial_rotary_factor", 1.0))


def yarn(cfg):
    # _compute_yarn_parameters
    rs = cfg["rope_scaling"]
    base, dim = cfg["rope_theta"], dim_of(cfg)
    factor = rs.get("factor")
    attention_factor = rs.get("attention_factor")
    mscale, mscale_all_dim = rs.get("mscale"), rs.get("mscale_all_dim")
    orig = rs.get("original_max_position_embeddings", cfg["max_position_embeddings"])
    if factor is None:
        factor = cfg["max_position_embeddings"] / orig

    def get_mscale(scale, mscale=1):
        if scale <= 1:
            return 1.0
        return 0.1 * mscale * math.log(scale) + 1.0

    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
        else:
            attention_factor = get_mscale(factor)
    beta_fast = rs.get("beta_fast") or 32
    beta_slow = rs.get("beta_slow") or 1

    def find_correction_dim(num_rotations, dim, base, max_position_embeddings):
        return (dim * math.log(max_position_embeddings / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    def find_correction_range(low_rot, high_rot, dim, base, max_position_embeddings, truncate):
        low = find_correction_dim(low_rot, dim, base, max_position_embeddings)
        high = find_correction_dim(high_rot, dim, base, max_position_embeddings)
        if truncate:
            low = math.floor(low)
            high = math.ceil(high)
        return max(low, 0), min(high, dim - 1)

    def linear_ramp_factor(min, max, dim):
        if min == max:
            max += 0.001
        linear_func = (torch.arange(dim, dtype=torch.float32) - min) / (max - min)
        return torch.clamp(linear_func, 0, 1)

    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (factor * pos_freqs)
    truncate = rs.get("truncate", True)
    low, high = find_correction_range(beta_fast, beta_slow, dim, base, orig, truncate)
    inv_freq_extrapolation_factor = 1 - linear_ramp_factor(low, high, dim // 2).to(dtype=torch.float)
    inv_freq = (inv_freq_interpolation * (1 - inv_freq_extrapolation_factor)
                + inv_freq_extrapolation * inv_freq_extrapolation_factor)
    return inv_freq, attention_factor


def linear(cfg):
    # _compute_linear_scaling_rope_parameters: the default inv_freq / factor, attention factor 1
    base, dim = cfg["rope_theta"], dim_of(cfg)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    return inv_freq / cfg["rope_scaling"]["factor"], 1.0


def dynamic(cfg, seq_len):
    # _compute_dynamic_ntk_parameters with seq_len = max(position_ids) + 1 (a tensor, as dynamic_rope_update passes it)
    base, dim = cfg["rope_theta"], dim_of(cfg)
    factor = cfg["rope_scaling"]["factor"]
    seq_len = torch.maximum(torch.tensor(seq_len), torch.tensor(cfg["max_position_embeddings"]))
    base = base * ((factor * seq_len / cfg["max_position_embeddings"]) - (factor - 1)) ** (dim / (dim - 2))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    return inv_freq, 1.0


def longrope(cfg, seq_len):
    # _compute_longrope_parameters
    rs = cfg["rope_scaling"]
    base, dim = cfg["rope_theta"], dim_of(cfg)
    factor, attention_factor = rs.get("factor"), rs.get("attention_factor")
    orig = rs.get("original_max_position_embeddings", cfg["max_position_embeddings"])
    if factor is None:
        factor = cfg["max_position_embeddings"] / orig
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    ext = torch.tensor(rs["long_factor"] if seq_len and seq_len > orig else rs["short_factor"], dtype=torch.float32)
    inv_freq_shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    return 1.0 / (ext * base ** inv_freq_shape), attention_factor


def cos_sin_rows(cfg, n_prompt, T):
    """cos, sin [T, hd]: position p rotated with the frequencies of the pass that computed it."""
    kind = cfg["rope_scaling"].get("rope_type", cfg["rope_scaling"].get("type"))
    rows_c, rows_s = [], []
    for p in range(T):
        if kind == "yarn":
            inv_freq, att = yarn(cfg)
        elif kind == "linear":
            inv_freq, att = linear(cfg)
        elif kind == "dynamic":
            inv_freq, att = dynamic(cfg, n_prompt if p < n_prompt else p + 1)
        else:
            inv_freq, att = longrope(cfg, T)
        freqs = inv_freq.float() * torch.tensor(float(p))  # inv_freq @ position_ids for one position
        emb = torch.cat((freqs, freqs), dim=-1)
        rows_c.append(emb.cos() * att)
        rows_s.append(emb.sin() * att)
    return torch.stack(rows_c), torch.stack(rows_s)


def greedy(W, cfg, prompt):
    ids, toks, steps, gap = list(prompt), [], [], float("inf")
    for _ in range(STEPS):
        R.rope_cos_sin = lambda c, T, plain=False: cos_sin_rows(cfg, len(prompt), T)
        logits = R.forward(W, cfg, ids)[-1]
        vals, idx = torch.topk(logits, M.TOPK)
        gap = min(gap, float(vals[0] - vals[1]))
        steps.append({"token": int(idx[0]), "top": [[int(i), float(v)] for i, v in zip(idx, vals)]})
        toks.append(int(idx[0]))
        ids.append(int(idx[0]))
    return toks, steps, gap


def main():
    folder = os.path.join(shared, "fixtures/hf/llama")
    W = M.load_folder(folder)
    base = json.load(open(os.path.join(folder, "config.json")))
    gold = json.load(open(os.path.join(folder, "golden.json")))
    res = []
    for name, over in VARIANTS:
        cfg = dict(base)
        cfg.update(over)
        kind = cfg["rope_scaling"].get("rope_type", cfg["rope_scaling"].get("type"))
        v = {"variant": name, "config": over, "cases": []}
        if kind in ("yarn", "linear"):
            f, att = yarn(cfg) if kind == "yarn" else linear(cfg)
            v["inv_freq"] = [float(x) for x in f]
            v["attention_factor"] = float(att)
        elif kind == "longrope":
            fs, att = longrope(cfg, 1)
            fl, _ = longrope(cfg, 10 ** 9)
            v["inv_freq"], v["inv_freq_long"], v["attention_factor"] = [float(x) for x in fs], [float(x) for x in fl], float(att)
        for c in gold["cases"]:
            if len(c["prompt_ids"]) < 16:
                continue  # the scalings matter past 16 positions
            toks, steps, gap = greedy(W, cfg, c["prompt_ids"])
            v["cases"].append({"name": c["name"], "prompt_ids": c["prompt_ids"], "tokens": toks, "steps": steps,
                               "min_gap": gap})
        res.append(v)
        print(name, [round(c["min_gap"], 4) for c in v["cases"]], file=sys.stderr)
    doc = {"reference": "PyTorch %s float32; shared/tools/fixtures/hf/hf_reference.py with cos/sin from "
                        "modeling_rope_utils.py (see scripts/goldens/torch-rope-scaling.py)" % torch.__version__,
           "model": "../shared/fixtures/hf/llama", "gen_steps": STEPS, "variants": res}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
