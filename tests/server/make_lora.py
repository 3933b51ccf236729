#!/usr/bin/env python3
"""Writes a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors, PEFT's key
names, float32) with seeded random weights, for tests and benchmarks of adapters at inference:

    make_lora.py OUT_DIR --layers N --hidden H --out q_proj=Q,v_proj=V [--r 16] [--alpha A] [--seed S]
                 [--b-scale F]

--out gives each target module's output size (its input is --hidden; down_proj's input is not
supported here). A ~ U(-1/sqrt(H), 1/sqrt(H)), B ~ U(-F, F) (PEFT initializes B to 0; a trained
adapter's is not, and a zero B would change nothing). Only the standard library is used."""
import argparse, json, os, random, struct

ap = argparse.ArgumentParser()
ap.add_argument('out')
ap.add_argument('--layers', type=int, required=True)
ap.add_argument('--hidden', type=int, required=True)
ap.add_argument('--out-sizes', '--out', dest='outs', required=True)
ap.add_argument('--r', type=int, default=16)
ap.add_argument('--alpha', type=float)
ap.add_argument('--seed', type=int, default=0)
ap.add_argument('--b-scale', type=float, default=0.05)
a = ap.parse_args()
rng = random.Random(a.seed)
mods = [(m.split('=')[0], int(m.split('=')[1])) for m in a.outs.split(',')]
where = {'q_proj': 'self_attn', 'k_proj': 'self_attn', 'v_proj': 'self_attn', 'o_proj': 'self_attn',
         'gate_proj': 'mlp', 'up_proj': 'mlp'}
tensors = []  # (name, shape, bytes)
lim = 1.0 / a.hidden ** 0.5
for l in range(a.layers):
    for m, out in mods:
        base = 'base_model.model.model.layers.%d.%s.%s' % (l, where[m], m)
        A = [rng.uniform(-lim, lim) for _ in range(a.r * a.hidden)]
        B = [rng.uniform(-a.b_scale, a.b_scale) for _ in range(out * a.r)]
        tensors.append((base + '.lora_A.weight', [a.r, a.hidden], struct.pack('<%df' % len(A), *A)))
        tensors.append((base + '.lora_B.weight', [out, a.r], struct.pack('<%df' % len(B), *B)))
header, off = {}, 0
for name, shape, data in tensors:
    header[name] = {'dtype': 'F32', 'shape': shape, 'data_offsets': [off, off + len(data)]}
    off += len(data)
h = json.dumps(header, separators=(',', ':')).encode()
h += b' ' * ((8 - len(h) % 8) % 8)
os.makedirs(a.out, exist_ok=True)
with open(os.path.join(a.out, 'adapter_model.safetensors'), 'wb') as f:
    f.write(struct.pack('<Q', len(h)))
    f.write(h)
    for _, _, data in tensors:
        f.write(data)
cfg = {'peft_type': 'LORA', 'r': a.r, 'lora_alpha': a.alpha if a.alpha is not None else 2 * a.r,
       'target_modules': [m for m, _ in mods], 'bias': 'none', 'use_rslora': False, 'use_dora': False,
       'fan_in_fan_out': False, 'lora_dropout': 0.0, 'task_type': 'CAUSAL_LM'}
with open(os.path.join(a.out, 'adapter_config.json'), 'w') as f:
    json.dump(cfg, f, indent=1)
