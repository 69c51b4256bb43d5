#!/usr/bin/env python3
"""Writes the loader's reference vectors: small input images in every format
and colour type the loader must read, and what torchvision's eval transform
`Resize(n) + CenterCrop(m)` makes of them on PIL images.

Run from the repository root (needs Pillow, torch, torchvision, scikit-image):

    pip install torch torchvision scikit-image
    python3 scripts/make_loader_vectors.py

Inputs come from scikit-image's sample photographs (CC0 / public domain).
Expected crops are stored as PNG (lossless). `vectors.json` lists the cases.
"""
import io
import json
import os

import numpy as np
import skimage
import torchvision.transforms as T
from PIL import Image

OUT = os.path.join("loader", "tests", "vectors")
DATA = os.path.join(os.path.dirname(skimage.__file__), "data")
MODES = {
    "bilinear": T.InterpolationMode.BILINEAR,
    "bicubic": T.InterpolationMode.BICUBIC,
}


def photo(name, size=None, box=None):
    im = Image.open(os.path.join(DATA, name)).convert("RGB")
    if box:
        im = im.crop(box)
    if size:
        im = im.resize(size, Image.BILINEAR)
    return im


def main():
    os.makedirs(os.path.join(OUT, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "expected"), exist_ok=True)
    cat = photo("chelsea.png")                       # 451x300
    coffee = photo("coffee.png")                     # 600x400
    astro = photo("astronaut.png", box=(96, 0, 416, 240))  # 320x240 crop
    small = photo("chelsea.png", size=(180, 120))    # for the lossless formats
    small_rgba = small.copy()
    small_rgba.putalpha(Image.linear_gradient("L").resize(small.size))
    gray = small.convert("L")

    inputs = {}

    def save(name, image, fmt, **kw):
        buf = io.BytesIO()
        image.save(buf, fmt, **kw)
        with open(os.path.join(OUT, "inputs", name), "wb") as f:
            f.write(buf.getvalue())
        inputs[name] = image

    save("cat_420.jpg", cat, "JPEG", quality=90)               # 4:2:0 chroma
    save("coffee_444.jpg", coffee, "JPEG", quality=92, subsampling=0)
    save("astronaut_gray.jpg", astro.convert("L"), "JPEG", quality=90)
    save("cat_cmyk.jpg", small.convert("CMYK"), "JPEG", quality=95)
    save("cat_rgb.png", small, "PNG")
    save("cat_rgba.png", small_rgba, "PNG")
    save("cat_gray.png", gray, "PNG")
    save("cat_gray_alpha.png", small_rgba.convert("LA"), "PNG")
    save("cat_palette.png", small.quantize(colors=256), "PNG")
    save("cat.gif", small, "GIF")
    save("cat.bmp", small, "BMP")
    save("cat.tiff", small, "TIFF")
    save("cat.webp", small, "WEBP", lossless=True)
    # Lossy WebP (VP8, 4:2:0 chroma, fancy upsampling on decode): decoders
    # may differ here, and the loader must decode as Pillow's libwebp does.
    save("cat_lossy.webp", cat, "WEBP", quality=85)
    # 16-bit RGB: each 8-bit value v stored as v * 257, so both Pillow's
    # high-byte reduction and rounding give back v.
    arr16 = (np.asarray(small).astype(np.uint16) * 257)
    import png16  # noqa: E402  (local helper below, keeps numpy-only PNG writing)
    with open(os.path.join(OUT, "inputs", "cat_rgb16.png"), "wb") as f:
        f.write(png16.encode(arr16))
    inputs["cat_rgb16.png"] = small  # what the 16-bit file holds, at 8 bits
    gray16 = np.asarray(gray).astype(np.uint16) * 257
    with open(os.path.join(OUT, "inputs", "cat_gray16.png"), "wb") as f:
        f.write(png16.encode(gray16))
    # Pillow opens 16-bit gray as I;16, which convert("RGB") clips to 255:
    # the reference is what Pillow reads, as for every other file (#39).
    inputs["cat_gray16.png"] = gray

    cases = []
    for name in sorted(inputs):
        # Re-open what was written: what Pillow reads is the reference.
        source = Image.open(os.path.join(OUT, "inputs", name)).convert("RGB")
        specs = [(256, 224, "bilinear"), (64, 56, "bilinear")]
        if name in ("cat_420.jpg", "cat_rgb.png"):
            specs.append((160, 144, "bicubic"))
        for resize, crop, filt in specs:
            tf = T.Compose([T.Resize(resize, interpolation=MODES[filt]), T.CenterCrop(crop)])
            out = tf(source)
            stem = f"{os.path.splitext(name)[0]}_{os.path.splitext(name)[1][1:]}_{resize}_{crop}_{filt}.png"
            out.save(os.path.join(OUT, "expected", stem))
            cases.append({
                "input": f"inputs/{name}",
                "resize": resize,
                "crop": crop,
                "filter": filt,
                "expected": f"expected/{stem}",
            })
    with open(os.path.join(OUT, "vectors.json"), "w") as f:
        json.dump({"generator": "scripts/make_loader_vectors.py",
                   "pillow": Image.__version__,
                   "torchvision": __import__("torchvision").__version__,
                   "cases": cases}, f, indent=1)
    print(f"{len(cases)} cases written to {OUT}")


if __name__ == "__main__":
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
