#!/usr/bin/env python3
# bench/compare-embed/make_bert.py DIR: a random-weight BertModel folder shaped as BAAI/bge-small-en-v1.5
# (33M parameters: hidden 384, 12 layers, 12 heads, FFN 1536, vocab 30522, 512 positions), F32, with
# modules.json (CLS pooling, Normalize). The weights are a block of 65536 N(0, 0.02) values tiled
# (seed 0): speed does not depend on their values. No tokenizer: the bench feeds token ids.
import array, json, os, random, struct, sys
d = sys.argv[1]; os.makedirs(d + "/1_Pooling", exist_ok=True)
H, L, F, V, P = 384, 12, 1536, 30522, 512
cfg = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": H, "num_hidden_layers": L,
       "num_attention_heads": 12, "intermediate_size": F, "vocab_size": V, "max_position_embeddings": P,
       "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0, "torch_dtype": "float32"}
json.dump(cfg, open(d + "/config.json", "w"))
json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
           {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
          open(d + "/modules.json", "w"))
json.dump({"word_embedding_dimension": H, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False},
          open(d + "/1_Pooling/config.json", "w"))
random.seed(0)
block = array.array("f", [random.gauss(0, 0.02) for _ in range(65536)]).tobytes()
shapes = [("embeddings.word_embeddings.weight", [V, H]), ("embeddings.position_embeddings.weight", [P, H]),
          ("embeddings.token_type_embeddings.weight", [2, H]), ("embeddings.LayerNorm.weight", [H]),
          ("embeddings.LayerNorm.bias", [H])]
for l in range(L):
    p = f"encoder.layer.{l}."
    for n in ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"]:
        shapes += [(p + n + ".weight", [H, H]), (p + n + ".bias", [H])]
    shapes += [(p + "attention.output.LayerNorm.weight", [H]), (p + "attention.output.LayerNorm.bias", [H]),
               (p + "intermediate.dense.weight", [F, H]), (p + "intermediate.dense.bias", [F]),
               (p + "output.dense.weight", [H, F]), (p + "output.dense.bias", [H]),
               (p + "output.LayerNorm.weight", [H]), (p + "output.LayerNorm.bias", [H])]
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
        src = ones if n.endswith("LayerNorm.weight") else block
        while k > 0:
            c = min(k, len(src)); f.write(src[:c]); k -= c
