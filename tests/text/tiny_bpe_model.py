#!/usr/bin/env python3
"""tests/text/tiny_bpe_model.py OUTDIR: a random-weight 1-layer Llama checkpoint (tests/server/make_tok_model.py)
over a 7-token BPE vocabulary without byte fallback: <s> </s> a b ab " " c. Its tokens cannot spell any other
byte, so a grammar that needs one reaches a dead end (docs/grammar.md). Not a test."""
import json, os, subprocess, sys, tempfile

out = sys.argv[1]
special = lambda i, c: {"id": i, "content": c, "special": True, "single_word": False, "lstrip": False,
                        "rstrip": False, "normalized": False}
tj = {"version": "1.0", "added_tokens": [special(0, "<s>"), special(1, "</s>")],
      "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
      "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                "vocab": {"<s>": 0, "</s>": 1, "a": 2, "b": 3, "ab": 4, " ": 5, "c": 6}, "merges": ["a b"]}}
with tempfile.TemporaryDirectory() as tok:
    json.dump(tj, open(os.path.join(tok, "tokenizer.json"), "w"))
    json.dump({"bos_token": "<s>", "eos_token": "</s>"}, open(os.path.join(tok, "tokenizer_config.json"), "w"))
    subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server",
                                                 "make_tok_model.py"), tok, out], check=True)
