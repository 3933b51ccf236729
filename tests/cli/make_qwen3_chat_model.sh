#!/usr/bin/env bash
# Sourced by shell tests (not a test): make_qwen3_chat_model DIR writes a whole chat checkpoint into
# DIR: the qwen3 fixture's weights (vocab 320) with Qwen3's tokenizer cut to its 294 base ids (their
# merges) and its 26 added tokens renumbered 294..319. Needs HF and TK set to the fixture folders.
make_qwen3_chat_model() {
    local D=$1
    mkdir -p "$D"
    cp "$HF/qwen3/config.json" "$HF/qwen3/generation_config.json" "$HF/qwen3/model.safetensors" "$D/"
    python3 - "$TK/qwen3" "$D" <<'PY'
import json, sys
src, dst = sys.argv[1], sys.argv[2]
t = json.load(open(src + '/tokenizer.json')); c = json.load(open(src + '/tokenizer_config.json'))
N = 294
vocab = {k: v for k, v in t['model']['vocab'].items() if v < N}
t['model']['vocab'] = vocab
t['model']['merges'] = [m for m in t['model']['merges'] if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
remap = {}
for j, a in enumerate(t['added_tokens']):
    remap[str(a['id'])] = str(N + j); a['id'] = N + j
assert N + len(t['added_tokens']) == 320
c['added_tokens_decoder'] = {remap[k]: v for k, v in c['added_tokens_decoder'].items()}
json.dump(t, open(dst + '/tokenizer.json', 'w'), ensure_ascii=False)
json.dump(c, open(dst + '/tokenizer_config.json', 'w'), ensure_ascii=False)
PY
}
