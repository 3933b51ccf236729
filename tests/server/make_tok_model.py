#!/usr/bin/env python3
"""tests/server/make_tok_model.py TOKDIR OUTDIR: a 1-layer random-weight Llama checkpoint (hidden 16, tied
embeddings, F32) whose vocabulary is the size of TOKDIR's tokenizer, with TOKDIR's tokenizer files
copied beside it. Not a test: the logprobs test uses it to run a real tokenizer through the server.
Weights are uniform in (-0.04, 0.04) from Python's random.Random(1), so the logits are small and sampling at
temperature 1 visits the whole vocabulary."""
import array, json, os, random, shutil, struct, sys

tokdir, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
for f in ('tokenizer.json', 'tokenizer_config.json', 'tokenizer.model', 'special_tokens_map.json'):
    if os.path.exists(os.path.join(tokdir, f)):
        shutil.copy(os.path.join(tokdir, f), os.path.join(out, f))
tj = json.load(open(os.path.join(tokdir, 'tokenizer.json'), encoding='utf-8'))
ids = list(tj['model']['vocab'].values()) if isinstance(tj['model']['vocab'], dict) else range(len(tj['model']['vocab']))
n_vocab = max(max(ids), max((a['id'] for a in tj.get('added_tokens', [])), default=0)) + 1
H, F, L, NH = 16, 32, 1, 2
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H, "intermediate_size": F,
       "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NH, "head_dim": H // NH,
       "hidden_act": "silu", "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
       "tie_word_embeddings": True, "torch_dtype": "float32", "vocab_size": n_vocab,
       "bos_token_id": None, "eos_token_id": None}
json.dump(cfg, open(os.path.join(out, 'config.json'), 'w'), indent=1)
rng = random.Random(1)
tensors = [("model.embed_tokens.weight", [n_vocab, H]), ("model.norm.weight", [H])]
for l in range(L):
    p = f"model.layers.{l}."
    tensors += [(p + "input_layernorm.weight", [H]), (p + "post_attention_layernorm.weight", [H]),
                (p + "self_attn.q_proj.weight", [H, H]), (p + "self_attn.k_proj.weight", [H, H]),
                (p + "self_attn.v_proj.weight", [H, H]), (p + "self_attn.o_proj.weight", [H, H]),
                (p + "mlp.gate_proj.weight", [F, H]), (p + "mlp.up_proj.weight", [F, H]),
                (p + "mlp.down_proj.weight", [H, F])]
header, blobs, off = {}, [], 0
for name, shape in tensors:
    n = 1
    for d in shape:
        n *= d
    if name.endswith("norm.weight"):
        a = array.array('f', [1.0] * n)
    else:
        a = array.array('f', [x * (0.02 / 64) for x in array.array('b', rng.randbytes(n))])
    b = a.tobytes()
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
h += b' ' * (-len(h) % 8)
with open(os.path.join(out, 'model.safetensors'), 'wb') as f:
    f.write(struct.pack('<Q', len(h)) + h)
    for b in blobs:
        f.write(b)
