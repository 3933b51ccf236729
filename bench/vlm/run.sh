#!/usr/bin/env bash
# SmolVLM-256M-shaped image benchmark (issue 19): a random-weight checkpoint with the real shapes
# (caldrix synth --shape smolvlm-256m, BF16), one 512x512 and one 2048x1536 PNG (random pixels), each
# run through `caldrix run --image` with a 16-token prompt around the image and 16 generated tokens.
# Prints the vision tower's time per tile and the text model's tok/s. The prompt ids are the
# processor's expansion of one <image> (grid from the processor's size rules: 512x512 is upscaled to
# 2048x2048 = 4x4 tiles + global; 2048x1536 = 3x4 + global), 64 image tokens per tile.
# Cost: the tower is ~230 GFLOP per 512 px tile (BF16 weights, f32 compute); on 2 shared AVX2 cores
# under load 11 one tile took 57 s wall (27 s CPU), so the two images (17 + 13 tiles) take tens of
# minutes there: run it on an idle machine.
#   bench/vlm/run.sh [-t THREADS]
set -eu
cd "$(dirname "$0")/../.."
CALDRIX=${CALDRIX:-build/caldrix}
T=2
[ "${1:-}" = "-t" ] && T=$2
M=bench/out/smolvlm-256m
out=bench/out/vlm
mkdir -p "$out"
[ -f "$M/model.safetensors" ] || "$CALDRIX" synth "$M" --shape smolvlm-256m
python3 - "$out" <<'PY'
import random, struct, sys, zlib
def png(path, w, h, seed):
    r = random.Random(seed)
    rows = b''.join(b'\0' + bytes(r.getrandbits(8) for _ in range(3 * w)) for _ in range(h))
    def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
    open(path, 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) +
                           chunk(b'IDAT', zlib.compress(rows, 1)) + chunk(b'IEND', b''))
png(sys.argv[1] + '/img_512x512.png', 512, 512, 1)
png(sys.argv[1] + '/img_2048x1536.png', 2048, 1536, 2)
PY
ids() { # ROWS COLS: 8 text ids, the expansion (SmolVLM-256M's special ids), 8 text ids
    python3 - "$1" "$2" <<'PY'
import sys
rows, cols = int(sys.argv[1]), int(sys.argv[2])
FAKE, GLOBAL, IMAGE, NL, NL2 = 49189, 49152, 49190, 198, 271
out = [1, 11, 12, 13, 14, 15, 16, 17]
for r in range(rows):
    for c in range(cols):
        out += [FAKE, 49153 + 6 * r + c] + [IMAGE] * 64
    out.append(NL if r < rows - 1 else NL2)
out += [FAKE, GLOBAL] + [IMAGE] * 64 + [FAKE] + [21, 22, 23, 24, 25, 26, 27, 28]
print(','.join(map(str, out)))
PY
}
for c in "img_512x512.png 4 4" "img_2048x1536.png 3 4"; do
    set -- $c
    "$CALDRIX" run "$M" --prompt-ids "$(ids "$2" "$3")" --image "$out/$1" -n 16 --temp 0 --ignore-eos --threads "$T" --json \
        > "$out/$1.json"
    python3 - "$out/$1.json" "$1" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))['timings']
n = len(json.load(open(sys.argv[1]))['prompt'])
tiles, enc = t['image_tiles'], t['image_encode_ms']
prefill_s = n / t['prefill_tok_s']
text_s = prefill_s - enc / 1000
print('%-18s tiles %2d  encode %8.1f ms (%7.1f ms/tile)  prompt %4d tok: text prefill %6.1f tok/s (%6.1f with encoding)  decode %5.2f tok/s'
      % (sys.argv[2], tiles, enc, enc / tiles, n, n / text_s, t['prefill_tok_s'], t['decode_tok_s']))
PY
done
