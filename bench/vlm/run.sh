#!/usr/bin/env bash
# SmolVLM-256M-shaped image benchmark (issue 19): a random-weight checkpoint with the real shapes
# (caldrix synth --shape smolvlm-256m, BF16), one 512x512 and one 2048x1536 PNG (random pixels), each
# run through `caldrix run --image` with a 16-token prompt around the image and 16 generated tokens.
# Prints the vision tower's time per tile (wall, from the run's timings) and the process's CPU time
# (user + sys, the whole run: load, encoding, text prefill and decode), and the text model's tok/s.
# The prompt ids are the processor's expansion of one <image> (grid from the processor's size
# rules: 512x512 is upscaled to 2048x2048 = 4x4 tiles + global; 2048x1536 = 3x4 + global), 64 image
# tokens per tile. --one runs a single tile instead (the 512x512 image with do_image_splitting=false:
# the global image only), for quick A/B timings.
# Cost: the tower is ~215 GFLOP per 512 px tile (BF16 weights, f32 compute).
#   bench/vlm/run.sh [-t THREADS] [--one]
set -eu
cd "$(dirname "$0")/../.."
CALDRIX=${CALDRIX:-build/caldrix}
T=2
ONE=0
while [ $# -gt 0 ]; do
    case "$1" in
        -t) T=$2; shift 2 ;;
        --one) ONE=1; shift ;;
        *) echo "usage: bench/vlm/run.sh [-t THREADS] [--one]" >&2; exit 2 ;;
    esac
done
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
ids_one() { # the global image alone
    python3 -c 'print(",".join(map(str, [1, 11, 12, 13, 14, 15, 16, 17, 49189, 49152] + [49190] * 64 + [49189, 21, 22, 23, 24, 25, 26, 27, 28])))'
}
report() { # JSON NAME CPU_SECONDS
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t, n = d['timings'], len(d['prompt'])
tiles, enc, cpu = t['image_tiles'], t['image_encode_ms'], float(sys.argv[3])
prefill_s = n / t['prefill_tok_s']
text_s = prefill_s - enc / 1000
print('%-18s tiles %2d  encode %8.1f ms wall (%7.1f ms/tile)  run CPU %6.1f s  prompt %4d tok: text prefill %6.1f tok/s (%6.1f with encoding)  decode %5.2f tok/s'
      % (sys.argv[2], tiles, enc, enc / tiles, cpu, n, n / text_s, t['prefill_tok_s'], t['decode_tok_s']))
PY
}
run() { # NAME OUT.json ARGS...: runs caldrix, prints the report
    local name=$1 json=$2
    shift 2
    /usr/bin/time -f '%U %S' -o "$json.time" "$CALDRIX" run "$M" "$@" -n 16 --temp 0 --ignore-eos --threads "$T" --json > "$json"
    report "$json" "$name" "$(awk '{print $1 + $2}' "$json.time")"
}
echo "caldrix $("$CALDRIX" version 2>/dev/null | head -1); threads $T; load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$ONE" = 1 ]; then
    run "img_512x512 (1)" "$out/one.json" --prompt-ids "$(ids_one)" --image "$out/img_512x512.png" \
        --image-opt do_image_splitting=false
    exit 0
fi
for c in "img_512x512.png 4 4" "img_2048x1536.png 3 4"; do
    set -- $c
    run "$1" "$out/$1.json" --prompt-ids "$(ids "$2" "$3")" --image "$out/$1"
done
