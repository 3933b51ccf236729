#!/usr/bin/python3
# Small PNG/JPEG fixtures and PIL's RGB bytes for them (tests/image/test_image_pil.c): the images
# transformers' processors see after PIL.Image.open(...) and image_transforms.convert_to_rgb (an
# image that is not RGB is converted to RGBA, alpha-composited over opaque white with
# Image.alpha_composite, then converted to RGB; RGB comes back unchanged). Debian's python3-pil
# (its libjpeg is libjpeg62-turbo, the library caldrix links), so a JPEG's bytes are libjpeg-turbo's
# default decode (islow DCT, fancy upsampling), as PIL decodes it.
#   /usr/bin/python3 scripts/goldens/pil-image-decode.py    (from the repo root; rewrites both)
import hashlib, io, json, os, random
from PIL import Image

OUT = 'tests/fixtures/image-pil'
os.makedirs(OUT, exist_ok=True)
r = random.Random(19)

def rnd_bytes(n):
    return bytes(r.getrandbits(8) for _ in range(n))

def convert_to_rgb(im):  # transformers.image_transforms.convert_to_rgb
    if im.mode == 'RGB':
        return im
    rgba = im.convert('RGBA')
    bg = Image.new('RGBA', rgba.size, (255, 255, 255))
    return Image.alpha_composite(bg, rgba).convert('RGB')

made = {}
# RGBA with every kind of alpha (0, 255, and values in between)
a = bytearray(rnd_bytes(7 * 5 * 4))
for i, v in enumerate([0, 255, 1, 254, 128, 127]):
    a[4 * i + 3] = v
made['rgba_7x5.png'] = Image.frombytes('RGBA', (7, 5), bytes(a))
# gray + alpha
made['la_5x3.png'] = Image.frombytes('LA', (5, 3), rnd_bytes(5 * 3 * 2))
# gray
made['l_4x3.png'] = Image.frombytes('L', (4, 3), rnd_bytes(4 * 3))
# palette with one transparent entry and partial alphas (a tRNS chunk)
p = Image.frombytes('P', (6, 4), bytes(r.randrange(8) for _ in range(24)))
p.putpalette(list(rnd_bytes(8 * 3)))
p.info['transparency'] = bytes([0, 255, 90, 200, 255, 255, 255, 10])
made['p_trns_6x4.png'] = p
# palette, opaque
q = Image.frombytes('P', (5, 5), bytes(r.randrange(16) for _ in range(25)))
q.putpalette(list(rnd_bytes(16 * 3)))
made['p_5x5.png'] = q

gold = {'generator': 'scripts/goldens/pil-image-decode.py', 'pil': Image.__version__, 'images': {}}
for name, im in made.items():
    im.save(os.path.join(OUT, name), **({'transparency': im.info['transparency']} if 'transparency' in im.info else {}))
# JPEGs: smooth content (random pixels would be all edges), 4:2:0 and 4:4:4, odd sizes
for name, (w, h, sub) in {'ycc420_13x9.jpg': (13, 9, 2), 'ycc444_16x8.jpg': (16, 8, 0), 'gray_9x7.jpg': (9, 7, -1)}.items():
    if sub < 0:
        im = Image.frombytes('L', (w, h), bytes((x * 23 + y * 31) % 256 for y in range(h) for x in range(w)))
        im.save(os.path.join(OUT, name), quality=85)
    else:
        im = Image.frombytes('RGB', (w, h), bytes(((x * 19 + y * 7 + c * 60) * (c + 1)) % 256
                                                  for y in range(h) for x in range(w) for c in range(3)))
        im.save(os.path.join(OUT, name), quality=85, subsampling=sub)
for name in sorted(os.listdir(OUT)):
    im = Image.open(os.path.join(OUT, name))
    im.load()
    mode = im.mode
    rgb = convert_to_rgb(im)
    gold['images'][name] = {'mode': mode, 'width': rgb.size[0], 'height': rgb.size[1],
                            'rgb_sha256': hashlib.sha256(rgb.tobytes()).hexdigest()}
with open('tests/golden/image-pil.json', 'w') as f:
    json.dump(gold, f, indent=1, sort_keys=True)
    f.write('\n')
print(json.dumps(gold['images'], indent=1))
