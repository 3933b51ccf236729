#!/usr/bin/env python3
"""A PEFT LoRA adapter as llama.cpp's GGUF LoRA adapter, the way llama.cpp's convert_lora_to_gguf.py
writes one (F32): general.type "adapter", adapter.type "lora", adapter.lora.alpha, and per module
blk.N.<name>.weight.lora_a (PEFT's A, [r, in]: ne [in, r]) and .lora_b (B, [out, r]: ne [r, out]);
for llama-family models B's rows of q_proj and k_proj are permuted as the converter permutes the
base's q/k rows (LlamaModel.permute). Only what the tests need: F32 safetensors, llama and qwen3.
Test preparation only: llama.cpp reading the file is the judge of its format
(scripts/goldens/llamacpp-lora-gguf.mjs).

    lora_to_gguf.py BASE_HF_DIR PEFT_DIR OUT.gguf
"""
import json
import struct
import sys

NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
         "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
ARCH = {"LlamaForCausalLM": ("llama", True), "Qwen3ForCausalLM": ("qwen3", False)}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        if v["dtype"] != "F32":
            sys.exit(f"{path}: {k} is {v['dtype']}; only F32 here")
        b, e = v["data_offsets"]
        out[k] = (v["shape"], data[b:e])
    return out


def permute_rows(shape, raw, n_head):
    """LlamaModel.permute on an [out, cols] f32 matrix: per head, rows (i*hd/2 + j) -> (j*2 + i)."""
    rows, cols = shape
    hd = rows // n_head
    rb = cols * 4
    out = bytearray(len(raw))
    for h in range(n_head):
        for i in range(2):
            for j in range(hd // 2):
                src = h * hd + i * (hd // 2) + j
                dst = h * hd + j * 2 + i
                out[dst * rb:(dst + 1) * rb] = raw[src * rb:(src + 1) * rb]
    return bytes(out)


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def main():
    base, peft, out = sys.argv[1:4]
    cfg = json.load(open(f"{base}/config.json"))
    arch, permute = ARCH[cfg["architectures"][0]]
    n_head = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_head)
    acfg = json.load(open(f"{peft}/adapter_config.json"))
    ts = read_safetensors(f"{peft}/adapter_model.safetensors")
    tensors = []  # (name, ne, raw)
    for key in sorted(ts):
        # base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight
        parts = key.split(".")
        layer = int(parts[parts.index("layers") + 1])
        mod = parts[-3]
        ab = parts[-2]
        shape, raw = ts[key]
        if permute and ab == "lora_B" and mod in ("q_proj", "k_proj"):
            raw = permute_rows(shape, raw, n_head if mod == "q_proj" else n_kv)
        name = f"blk.{layer}.{NAMES[mod]}.weight.lora_{'a' if ab == 'lora_A' else 'b'}"
        tensors.append((name, [shape[1], shape[0]], raw))
    kv = [("general.architecture", 8, gguf_str(arch)), ("general.type", 8, gguf_str("adapter")),
          ("adapter.type", 8, gguf_str("lora")), ("adapter.lora.alpha", 6, struct.pack("<f", float(acfg["lora_alpha"])))]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for k, t, v in kv:
        head += gguf_str(k) + struct.pack("<I", t) + v
    off = 0
    data = b""
    for name, ne, raw in tensors:
        head += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
        head += struct.pack("<IQ", 0, off)  # F32
        pad = (-len(raw)) % 32
        data += raw + b"\0" * pad
        off += len(raw) + pad
    head += b"\0" * ((-len(head)) % 32)
    with open(out, "wb") as f:
        f.write(head + data)


main()
