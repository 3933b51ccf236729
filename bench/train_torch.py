#!/usr/bin/python3
"""The PyTorch side of bench/compare-train: LoRA training with the fixture generator's implementation.

  /usr/bin/python3 bench/train_torch.py MODEL_DIR DATA.jsonl --steps N --lora-r R --lora-alpha A
                   --lora-targets q_proj,v_proj --lr F -t THREADS --ref DIR

MODEL_DIR is a Hugging Face checkpoint folder (config.json + model.safetensors, F32/F16/BF16), read into
float32 tensors. The forward pass is ../shared/tools/fixtures/train/train_ref.py's forward_ref (the
float32 transcription of transformers' modeling code plus PEFT's LoRA branch, the code behind
../shared/fixtures/train), the loss transformers' ForCausalLMLoss (sum over the scored positions /
their count), the optimizer torch.optim.AdamW over the adapter, batch 1, one sequence a step, in file
order. Prints one line a step ("step k/N  loss x  n tokens  s seconds") and at the end a JSON line
{"engine": "pytorch", "steps": [...seconds...], "tokens": [...], "loss": [...]}.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch


def read_safetensors(path):
    """{name: float32 tensor} from a .safetensors file (F32, F16 or BF16), without the safetensors package."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = json.loads(f.read(n))
        base = 8 + n
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in head.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = mm[base + a: base + b]
        dt = info["dtype"]
        if dt == "F32":
            t = torch.from_numpy(np.array(raw.view(np.float32)))
        elif dt == "F16":
            t = torch.from_numpy(raw.view(np.float16).astype(np.float32))
        elif dt == "BF16":
            u = raw.view(np.uint16).astype(np.uint32) << 16
            t = torch.from_numpy(u.view(np.float32).copy())
        else:
            raise SystemExit(f"{path}: {name} is {dt}; this script reads F32, F16 and BF16")
        out[name] = t.reshape(info["shape"])
    del mm
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--lora-alpha", type=float, default=32)
    ap.add_argument("--lora-targets", default="q_proj,v_proj")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--ref", required=True, help="the folder holding train_ref.py (../shared/tools/fixtures/train)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    sys.path.insert(0, os.path.abspath(a.ref))
    import train_ref  # noqa: E402  (imports hf_reference from ../hf)

    cfg = json.load(open(os.path.join(a.model, "config.json")))
    W = read_safetensors(os.path.join(a.model, "model.safetensors"))
    targets = a.lora_targets.split(",")
    lora = train_ref.init_lora(cfg, W, targets, a.lora_r, a.lora_alpha, a.seed)
    for A, B in lora.t.values():
        A.requires_grad_(True)
        B.requires_grad_(True)
    opt = torch.optim.AdamW(lora.params(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    ex = [json.loads(l) for l in open(a.data) if l.strip()]
    secs, toks, losses = [], [], []
    for k in range(a.steps):
        e = ex[k % len(ex)]
        ids, labels = e["input_ids"], e.get("labels", e["input_ids"])
        t0 = time.perf_counter()
        logits = train_ref.forward_ref(W, cfg, ids, lora)
        loss = train_ref.ce_sum(logits, labels) / train_ref.n_items(labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        dt = time.perf_counter() - t0
        secs.append(dt)
        toks.append(len(ids))
        losses.append(float(loss))
        print(f"step {k + 1}/{a.steps}  loss {float(loss):.6f}  {len(ids)} tokens  {dt:.3f} s", file=sys.stderr,
              flush=True)
    print(json.dumps({"engine": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "steps": secs, "tokens": toks, "loss": losses}))


if __name__ == "__main__":
    main()
