#!/usr/bin/env python3
"""Makes tests/golden/families-b-variants.json: PyTorch float32 greedy goldens of the "families B" fixtures'
weights (../shared/fixtures/hf/<family>) under config.json settings the fixtures do not use (another NoPE
pattern, OLMoE's clip_qkv and norm_topk_prob, other Granite-MoE multipliers, StableLM's rotary share,
Starcoder2's window), so a test can show caldrix
follows each setting rather than the fixture's values.

The forward pass is the fixtures' own reference, shared/tools/fixtures/hf/hf_reference_families_b.py
(written from transformers' modeling code, see its docstring); this script only changes config keys.

    /usr/bin/python3 scripts/goldens/torch-families-b-variants.py ../shared [tests/golden/families-b-variants.json]

(system python with Debian's python3-torch). Deterministic: a rerun writes the same bytes.
"""
import json
import os
import sys

import torch

shared = sys.argv[1] if len(sys.argv) > 1 else "../shared"
out = sys.argv[2] if len(sys.argv) > 2 else "tests/golden/families-b-variants.json"
sys.path.insert(0, os.path.join(shared, "tools/fixtures/hf"))
torch.set_num_threads(1)

import make_hf as M  # noqa: E402  (load_folder, TOPK)
from hf_reference_families_b import forward  # noqa: E402

STEPS = 8
VARIANTS = [
    # SmolLM3Config: an explicit list (1 = RoPE), and the interval used when the list is absent
    ("smollm3", "explicit no_rope_layers", {"no_rope_layers": [0, 1, 0, 1]}),
    ("smollm3", "no_rope_layer_interval 2, no list", {"no_rope_layers": None, "no_rope_layer_interval": 2}),
    # OlmoeConfig: renormalised top-k, and q/k/v clamped after the norms
    ("olmoe", "norm_topk_prob true", {"norm_topk_prob": True}),
    ("olmoe", "clip_qkv 0.5", {"clip_qkv": 0.5}),
    # GraniteMoeConfig: other multipliers
    ("granitemoe", "other multipliers", {"attention_multiplier": 0.1, "embedding_multiplier": 6.0,
                                         "residual_multiplier": 0.3, "logits_scaling": 4.0}),
    # StableLmConfig: another rotated share of head_dim
    ("stablelm", "partial_rotary_factor 0.5", {"partial_rotary_factor": 0.5}),
    # Starcoder2Config: no window, and a wider one
    ("starcoder2", "sliding_window null", {"sliding_window": None}),
    ("starcoder2", "sliding_window 16", {"sliding_window": 16}),
]


def greedy(W, cfg, prompt):
    ids, toks, steps, gap = list(prompt), [], [], float("inf")
    for _ in range(STEPS):
        logits = forward(W, cfg, ids)[-1]
        vals, idx = torch.topk(logits, M.TOPK)
        gap = min(gap, float(vals[0] - vals[1]))
        steps.append({"token": int(idx[0]), "top": [[int(i), float(v)] for i, v in zip(idx, vals)]})
        toks.append(int(idx[0]))
        ids.append(int(idx[0]))
    return toks, steps, gap


def main():
    res = []
    for fam, name, over in VARIANTS:
        folder = os.path.join(shared, "fixtures/hf", fam)
        W = M.load_folder(folder)
        base = json.load(open(os.path.join(folder, "config.json")))
        cfg = dict(base)
        cfg.update(over)
        if fam == "smollm3" and cfg.get("no_rope_layers") is None:  # SmolLM3Config.__post_init__
            n = cfg.get("no_rope_layer_interval", 4)
            cfg["no_rope_layers"] = [int((i + 1) % n != 0) for i in range(cfg["num_hidden_layers"])]
        gold = json.load(open(os.path.join(folder, "golden.json")))
        cases = []
        for c in gold["cases"]:
            toks, steps, gap = greedy(W, cfg, c["prompt_ids"])
            base_toks, _, _ = greedy(W, base, c["prompt_ids"])
            cases.append({"name": c["name"], "prompt_ids": c["prompt_ids"], "tokens": toks, "steps": steps,
                          "min_gap": gap, "differs_from_fixture_config": toks != base_toks})
            print(f"{fam} / {name} / {c['name']}: min gap {gap:.4f}, tokens differ from the fixture's config: "
                  f"{toks != base_toks}", file=sys.stderr)
        res.append({"family": fam, "variant": name, "config": over, "cases": cases})
    M.dump_json(out, {"reference": "PyTorch %s float32 via shared/tools/fixtures/hf/hf_reference_families_b.py, "
                      "config.json keys changed as listed; %d greedy steps" % (torch.__version__, STEPS),
                      "variants": res})


if __name__ == "__main__":
    main()
