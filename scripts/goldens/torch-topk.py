#!/usr/bin/env python3
"""Makes tests/golden/torch-topk.json: which indices torch.topk(v, k) returns on CPU when values tie, the choice the
bf16 pass's MoE routing follows (ops.c's model_topk_torch; bf16 router logits tie often). Each case: n values drawn
from a few levels (so most of them tie: "levels", and "at", one letter a level for each value), k, and the set of
indices torch.topk(..., largest=True) picked. Sizes cover
both of PyTorch's paths (topk_impl_loop: std::partial_sort when k * 64 <= n, else std::nth_element) and the expert
counts of real checkpoints (8, 60, 64, 128 experts; k 1 to 8).

    /usr/bin/python3 scripts/goldens/torch-topk.py [--out tests/golden/torch-topk.json]

(system python with Debian's python3-torch). Deterministic: a rerun writes the same bytes."""
import argparse
import json

import torch

SIZES = [(4, 2), (5, 5), (8, 1), (8, 2), (8, 3), (16, 4), (32, 8), (60, 4), (64, 1), (64, 8), (128, 2), (128, 8),
         (256, 4), (300, 3), (512, 8)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/golden/torch-topk.json")
    args = ap.parse_args()
    g = torch.Generator().manual_seed(36)
    cases = []
    for n, k in SIZES:
        for levels in (1, 2, 3, 5, 17):
            for rep in range(2):
                # values on `levels` distinct bf16 numbers, softmax-like magnitudes
                lv = torch.rand(levels, generator=g).to(torch.bfloat16).to(torch.float32)
                pick = torch.randint(0, levels, (n,), generator=g)
                idx = torch.topk(lv[pick], k).indices.tolist()
                # values[i] = levels[ord(at[i]) - ord('a')]
                cases.append({"k": k, "levels": [float(x) for x in lv], "at": "".join(chr(97 + int(p)) for p in pick),
                              "indices": sorted(idx)})
    with open(args.out, "w") as f:
        json.dump({"reference": "torch.topk on CPU, PyTorch %s" % torch.__version__, "cases": cases}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
