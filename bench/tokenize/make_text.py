#!/usr/bin/env python3
"""Writes bench/out/tokenize_text.txt: about 1 MB of English and code, assembled from the fixture
texts (shared/fixtures/tokenizers/texts.jsonl: prose, code, long paragraphs, contractions, URLs,
numbers) and the chat fixtures' templates (Jinja code) and READMEs (English). Paragraphs are drawn
with a fixed seed, so every run writes the same bytes."""
import glob
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared", "fixtures"))
OUT = os.path.join(ROOT, "bench", "out", "tokenize_text.txt")
TARGET = 1_000_000

KEEP = {"prose", "code", "long_paragraph", "contractions", "urls", "numbers", "misc", "whitespace"}

pieces = []
for line in open(os.path.join(SHARED, "tokenizers", "texts.jsonl"), encoding="utf-8"):
    o = json.loads(line)
    if o["category"] in KEEP and o["text"].strip():
        pieces.append(o["text"])
for path in sorted(glob.glob(os.path.join(SHARED, "chat", "*", "template.jinja")) +
                   glob.glob(os.path.join(SHARED, "*", "README.md")) +
                   glob.glob(os.path.join(SHARED, "*", "*", "README.md"))):
    text = open(path, encoding="utf-8").read()
    pieces.extend(p for p in text.split("\n\n") if p.strip())

rng = random.Random(20261129)
out, size = [], 0
while size < TARGET:
    p = rng.choice(pieces)
    out.append(p)
    size += len(p.encode("utf-8")) + 2
text = "\n\n".join(out)
data = text.encode("utf-8")[:TARGET]
while True:  # cut at a character boundary
    try:
        text = data.decode("utf-8")
        break
    except UnicodeDecodeError:
        data = data[:-1]
os.makedirs(os.path.dirname(OUT), exist_ok=True)
with open(OUT, "w", encoding="utf-8", newline="") as f:
    f.write(text)
print(f"{OUT}: {len(data)} bytes from {len(pieces)} fixture paragraphs")
