#!/usr/bin/env python3
# bench/compare-embed/make_qwen3.py DIR: a random-weight Qwen3-Embedding-0.6B-shaped folder (hidden 1024, 28 layers,
# 16 query / 8 key-value heads of 128, FFN 3072, vocab 151669, tied; 596M parameters), F32, laid out as
# Qwen3-Embedding ships (a Qwen3ForCausalLM config.json, the base model's tensors without "model.", modules.json
# with last-token pooling and Normalize), and DIR-rerank: the same weights (model.safetensors linked) with no
# modules.json, the Qwen3-Reranker-0.6B shape (caldrix convert --task rerank). The weights are a block of 65536
# N(0, 0.02) values tiled (seed 0), norms 1: speed does not depend on their values. No tokenizer: the bench
# feeds token ids.
import array, json, os, random, struct, sys
d = sys.argv[1]; os.makedirs(d + "/1_Pooling", exist_ok=True); os.makedirs(d + "-rerank", exist_ok=True)
H, L, F, V, NH, NKV, HD = 1024, 28, 3072, 151669, 16, 8, 128
cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": H, "num_hidden_layers": L,
       "intermediate_size": F, "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
       "vocab_size": V, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
       "hidden_act": "silu", "tie_word_embeddings": True, "attention_bias": False, "bos_token_id": 151643,
       "eos_token_id": 151643, "torch_dtype": "float32", "use_sliding_window": False, "sliding_window": None}
for x in (d, d + "-rerank"):
    json.dump(cfg, open(x + "/config.json", "w"))
json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
           {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
          open(d + "/modules.json", "w"))
json.dump({"word_embedding_dimension": H, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False,
           "pooling_mode_lasttoken": True, "include_prompt": True}, open(d + "/1_Pooling/config.json", "w"))
json.dump({"max_seq_length": 8192, "do_lower_case": False}, open(d + "/sentence_bert_config.json", "w"))
random.seed(0)
block = array.array("f", [random.gauss(0, 0.02) for _ in range(65536)]).tobytes()
shapes = [("embed_tokens.weight", [V, H]), ("norm.weight", [H])]
for l in range(L):
    p = f"layers.{l}."
    shapes += [(p + "input_layernorm.weight", [H]), (p + "post_attention_layernorm.weight", [H]),
               (p + "self_attn.q_proj.weight", [NH * HD, H]), (p + "self_attn.k_proj.weight", [NKV * HD, H]),
               (p + "self_attn.v_proj.weight", [NKV * HD, H]), (p + "self_attn.o_proj.weight", [H, NH * HD]),
               (p + "self_attn.q_norm.weight", [HD]), (p + "self_attn.k_norm.weight", [HD]),
               (p + "mlp.gate_proj.weight", [F, H]), (p + "mlp.up_proj.weight", [F, H]), (p + "mlp.down_proj.weight", [H, F])]
shapes.sort()
hdr, off = {"__metadata__": {"format": "pt"}}, 0
for n, s in shapes:
    k = 4
    for x in s: k *= x
    hdr[n] = {"dtype": "F32", "shape": s, "data_offsets": [off, off + k]}; off += k
h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
ones = array.array("f", [1.0] * 4096).tobytes()
with open(d + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h)
    for n, s in shapes:
        k = 4
        for x in s: k *= x
        src = ones if "norm" in n else block
        while k > 0:
            c = min(k, len(src)); f.write(src[:c]); k -= c
if not os.path.exists(d + "-rerank/model.safetensors"):
    os.symlink(os.path.abspath(d + "/model.safetensors"), d + "-rerank/model.safetensors")
