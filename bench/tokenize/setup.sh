#!/usr/bin/env bash
# Installs the pinned transformers.js (node_modules/ is git-ignored) and writes the benchmark text.
# --ignore-scripts: only the tokenizer is used; no ONNX runtime binaries are needed.
set -eu
cd "$(dirname "$0")"
npm install --ignore-scripts --no-audit --no-fund
python3 make_text.py
