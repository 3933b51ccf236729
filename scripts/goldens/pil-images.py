#!/usr/bin/python3
"""Small PNG and JPEG files made and decoded by Pillow (Debian python3-pil 9.4.0, linked to the
system libpng and libjpeg-turbo), with the SHA-256 of the RGB bytes transformers' image processors
see: Idefics3ImageProcessor runs convert_to_rgb (image_transforms.py) on every input, which leaves an
"RGB" image as it is and otherwise converts to RGBA and alpha-composites it over opaque white.

    /usr/bin/python3 scripts/goldens/pil-images.py     # writes tests/image/pil/*.{png,jpg} + golden.json

tests/image/test_image.c decodes every file with caldrix and compares the bytes' hash."""
import hashlib, io, json, os, random
from PIL import Image

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "image", "pil")


def convert_to_rgb(im):  # transformers.image_transforms.convert_to_rgb, for a PIL image
    if im.mode == "RGB":
        return im
    rgba = im.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


def noise(w, h, ch, seed):
    r = random.Random(seed)
    return bytes(r.randrange(256) for _ in range(w * h * ch))


def smooth(w, h, seed):  # a photo-like RGB image (JPEG's subsampling and IDCT see gradients, not noise)
    r = random.Random(seed)
    a = [r.uniform(0.02, 0.3) for _ in range(6)]
    px = bytearray()
    for y in range(h):
        for x in range(w):
            for c in range(3):
                v = 128 + 100 * (((x * a[c] + y * a[c + 3]) % 2.0) - 1.0) + r.uniform(-20, 20)
                px.append(max(0, min(255, int(v))))
    return bytes(px)


def cases():
    # every alpha value 0..255 over random colours
    rgba = bytearray(noise(16, 16, 4, 1))
    for i in range(256):
        rgba[4 * i + 3] = i
    yield "rgba_all_alphas.png", Image.frombytes("RGBA", (16, 16), bytes(rgba)), {}
    yield "la_gray_alpha.png", Image.frombytes("LA", (13, 7), noise(13, 7, 2, 2)), {}
    yield "gray.png", Image.frombytes("L", (9, 5), noise(9, 5, 1, 3)), {}
    yield "bilevel.png", Image.frombytes("L", (17, 3), noise(17, 3, 1, 4)).convert("1"), {}
    pal = Image.frombytes("P", (11, 6), bytes(random.Random(5).randrange(16) for _ in range(66)))
    pal.putpalette(list(noise(16, 1, 3, 6)))
    yield "palette.png", pal, {}
    palt = pal.copy()
    palt.info["transparency"] = bytes([0, 64, 128, 255, 200, 10] + [255] * 10)
    yield "palette_trns.png", palt, {"transparency": palt.info["transparency"]}
    # an RGB PNG with a tRNS colour key: Pillow opens it as "RGB", so convert_to_rgb ignores the key
    key = Image.frombytes("RGB", (4, 2), bytes([1, 2, 3] * 4 + [9, 9, 9] * 4))
    yield "rgb_colour_key.png", key, {"transparency": (1, 2, 3)}
    gkey = Image.frombytes("L", (5, 2), bytes([7, 8, 9, 7, 7, 1, 2, 3, 7, 4]))
    yield "gray_colour_key.png", gkey, {"transparency": 7}
    yield "rgb_odd_420.jpg", Image.frombytes("RGB", (37, 23), smooth(37, 23, 7)), {"quality": 90}
    yield "rgb_444.jpg", Image.frombytes("RGB", (24, 16), smooth(24, 16, 8)), {"quality": 95, "subsampling": 0}
    yield "rgb_422.jpg", Image.frombytes("RGB", (33, 17), smooth(33, 17, 9)), {"quality": 80, "subsampling": 1}
    yield "rgb_progressive.jpg", Image.frombytes("RGB", (40, 30), smooth(40, 30, 10)), {"quality": 85, "progressive": True}
    yield "gray.jpg", Image.frombytes("L", (19, 11), smooth(19, 11, 11)[::3]), {"quality": 90}


def main():
    os.makedirs(OUT, exist_ok=True)
    gold = {"generator": "scripts/goldens/pil-images.py", "pillow": Image.__version__,
            "rule": "sha256 of the RGB bytes of convert_to_rgb(Image.open(file)) (transformers' convert_to_rgb)",
            "images": {}}
    for name, im, kw in cases():
        buf = io.BytesIO()
        im.save(buf, format="PNG" if name.endswith(".png") else "JPEG", **kw)
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(buf.getvalue())
        back = Image.open(io.BytesIO(buf.getvalue()))
        back.load()
        rgb = convert_to_rgb(back)
        assert rgb.mode == "RGB"
        gold["images"][name] = {"mode": back.mode, "width": rgb.width, "height": rgb.height,
                                "rgb_sha256": hashlib.sha256(rgb.tobytes()).hexdigest()}
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(gold, f, indent=1)
        f.write("\n")


main()
