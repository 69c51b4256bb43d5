"""Random images and the crops Pillow makes of them, for the loader's
property test against Pillow itself (`loader/tests/it/pillow_exact.rs`, #39).

From a seed, it makes `--count` images of random sizes, weighted toward the
edges (portraits at least twice as tall as wide and wider than the target,
aspect ratios up to 1:50 and 50:1, one-pixel sides, sizes near the target,
upscales, sides up to 12,000 pixels), in the modes people's files have
(RGB, L, LA, RGBA, P with transparency, CMYK, I;16 with and without tRNS,
and 16-bit RGB, RGBA and gray+alpha PNGs, which Pillow opens but cannot
write, so they are written here), with content that
stresses the filters (noise, gradients with noise, 0/255 combs that
overshoot bicubic's and Lanczos's lobes). Each is written as Pillow writes
it (PNG; CMYK as TIFF), then opened again and run through what a
torchvision or Hugging Face pipeline runs:

    Image.open(f).convert("RGB")  ->  Resize(n, filter)  ->  CenterCrop(m)

for the five Pillow filters models use (nearest, box, bilinear, bicubic,
lanczos), both crop roundings (torchvision's half-to-even, Hugging Face's
floor), and for some images a square resize (`Resize((n, n))`, SigLIP's),
which also resizes one axis alone.
`Resize` and `CenterCrop` are written out as torchvision computes them
(`int(n * long / short)`, Python's `round`), so no torch is needed.

Writes OUT/manifest.json (one entry per crop, with its offset into
OUT/expected.bin, the CHW bytes the loader writes) and the image files.

    python3 scripts/make_pillow_cases.py --seed 39 --count 240 --out DIR
"""

import argparse
import json
import os
import random
import struct
import zlib

from PIL import Image, ImageChops

FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "box": Image.Resampling.BOX,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
# Pillow's modes, and 16-bit PNGs Pillow opens but cannot write (written
# here): RGB, RGBA and gray+alpha at 16 bits, and I;16 with a tRNS chunk.
MODES = ["RGB", "L", "LA", "RGBA", "P", "CMYK", "I;16", "I;16+tRNS", "RGB;16", "RGBA;16", "LA;16"]
# (Pillow opens 16-bit gray+alpha as RGBA, the gray in R, G and B.)
OPENS_AS = {"I;16+tRNS": "I;16", "RGB;16": "RGB", "RGBA;16": "RGBA", "LA;16": "RGBA"}
# (resize of the shorter side, crop) of the built-in models.
STANDARD = [(256, 224), (224, 224), (232, 224), (248, 224)]
# Shapes every seed covers, with the built-in models' targets: the
# corners of the space, and #39's photos.
EDGES = [(1, 1), (1, 2), (2, 1), (1, 50), (50, 1), (250, 12000), (12000, 250),
         (362, 725), (303, 732), (615, 1755), (294, 969), (159, 413), (145, 1500)]
# Square resizes (SigLIP's) that change one axis only, or none.
SQUARE_EDGES = [(224, 500), (500, 224), (224, 224), (224, 3), (3, 224)]


def target(rng):
    if rng.random() < 0.3:
        return rng.choice(STANDARD)
    resize = rng.randint(4, 300)
    return resize, rng.randint(max(1, resize - 41), resize)


def shape(rng, resize):
    """A (width, height), weighted toward the edges of the space."""
    kind = rng.choices(
        ["tall", "extreme", "near", "one", "general", "big", "up"],
        weights=[5, 3, 3, 2, 4, 1, 2],
    )[0]
    if kind == "tall":  # the shapes of #39: h >= 2w, w above the target
        w = rng.randint(resize + 1, max(resize + 2, 2 * resize, 400))
        w, h = w, int(w * rng.uniform(2.0, 4.0))
    elif kind == "extreme":
        short = rng.randint(1, 60)
        w, h = short, min(12000, short * rng.randint(10, 50))
    elif kind == "near":
        short = max(1, resize + rng.randint(-3, 3))
        w, h = short, short + rng.randint(0, 3 * short)
    elif kind == "one":
        w, h = 1, rng.randint(1, 50)
    elif kind == "general":
        w, h = rng.randint(2, 800), rng.randint(2, 800)
    elif kind == "big":
        w, h = rng.randint(resize, resize + 40), rng.randint(6000, 12000)
    else:  # upscales
        w, h = rng.randint(2, max(2, resize - 1)), rng.randint(2, max(2, resize - 1))
    return (w, h) if rng.random() < 0.5 else (h, w)


def noise(rng, n, shift=0):
    data = rng.randbytes(n)
    if shift:
        data = data.translate(bytes(v >> shift for v in range(256)))
    return data


def band(rng, size):
    """One 8-bit band: noise, a gradient with noise, or a 0/255 comb."""
    w, h = size
    kind = rng.choice(["noise", "gradient", "comb"])
    if kind == "noise":
        return Image.frombytes("L", size, noise(rng, w * h))
    if kind == "gradient":
        grad = Image.linear_gradient("L").rotate(rng.choice([0, 90, 180, 270]))
        grad = grad.resize(size, Image.Resampling.BILINEAR)
        return ImageChops.add(grad, Image.frombytes("L", size, noise(rng, w * h, shift=3)))
    period = rng.randint(1, 3)
    stripe = (b"\x00" * period + b"\xff" * period) * (w // (2 * period) + 1)
    if rng.random() < 0.5:  # vertical stripes
        return Image.frombytes("L", size, stripe[:w] * h)
    rows = [stripe[:1] * w if (y // period) % 2 else b"\xff" * w for y in range(h)]
    return Image.frombytes("L", size, b"".join(rows))


def in_mode(rng, mode, size):
    """An image of `mode` and the file name ending Pillow saves it with."""
    w, h = size
    rgb = Image.merge("RGB", [band(rng, size) for _ in range(3)])
    if mode == "RGB":
        return rgb, "png"
    if mode == "L":
        return rgb.convert("L"), "png"
    if mode == "LA":
        return Image.merge("LA", (rgb.convert("L"), band(rng, size))), "png"
    if mode == "RGBA":
        return Image.merge("RGBA", (*rgb.split(), band(rng, size))), "png"
    if mode == "P":
        im = rgb.quantize(colors=rng.randint(2, 256))
        im.info["transparency"] = rng.randint(0, len(im.getpalette()) // 3 - 1)
        return im, "png"
    if mode == "CMYK":
        return Image.merge("CMYK", (*rgb.split(), band(rng, size))), "tiff"
    if mode in ("RGB;16", "RGBA;16", "LA;16"):
        bands = list(rgb.split()) if mode != "LA;16" else [rgb.convert("L")]
        if mode != "RGB;16":
            bands.append(band(rng, size))
        return png16(rng, size, bands), "png"
    # I;16: mostly values below 256 (kept by convert("RGB")), some above
    # (clipped to 255), little-endian.
    low = noise(rng, w * h)
    high = noise(rng, w * h).translate(bytes(0 if v < 180 else v for v in range(256)))
    data = bytes(b for pair in zip(low, high) for b in pair)
    im = Image.frombytes("I;16", size, data)
    if mode == "I;16+tRNS":
        im.info["transparency"] = rng.randint(0, 300)
    return im, "png"


def png16(rng, size, bands):
    """A 16-bit PNG (gray+alpha, RGB or RGBA by the number of bands): each
    sample's high byte from its band, the low byte noise."""
    w, h = size
    colour = {2: 4, 3: 2, 4: 6}[len(bands)]
    samples = [zip(b.tobytes(), noise(rng, w * h)) for b in bands]
    pixels = bytes(byte for px in zip(*samples) for pair in px for byte in pair)
    stride = w * len(bands) * 2
    raw = b"".join(b"\x00" + pixels[y * stride:(y + 1) * stride] for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 16, colour, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 6))
            + chunk(b"IEND", b""))


def resized_size(w, h, n, square):
    """torchvision's `Resize(n)` output size, the shorter side to n, or
    `Resize((n, n))`'s with `square`."""
    if square:
        return n, n
    short, long = (w, h) if w <= h else (h, w)
    new_long = int(n * long / short)
    return (n, new_long) if w <= h else (new_long, n)


def chw(img):
    return b"".join(band.tobytes() for band in img.split())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    cases = []
    with open(os.path.join(args.out, "expected.bin"), "wb") as expected:
        for i in range(args.count):
            square = False
            if i < len(EDGES):
                size, (resize, crop) = EDGES[i], STANDARD[i % 2]
            elif i < len(EDGES) + len(SQUARE_EDGES):
                size, resize, crop, square = SQUARE_EDGES[i - len(EDGES)], 224, 224, True
            else:
                resize, crop = target(rng)
                size = shape(rng, resize)
                if rng.random() < 0.15:
                    square = True
                    # One side at the size now and then: one axis resized.
                    if rng.random() < 0.5:
                        size = (resize, size[1]) if rng.random() < 0.5 else (size[0], resize)
            mode = rng.choice(MODES)
            # Palettes and 16-bit values are made pixel by pixel in Python:
            # keep those images small.
            if (mode == "P" or "16" in mode) and size[0] * size[1] > 600_000:
                mode = "RGB"
            image, ext = in_mode(rng, mode, size)
            name = f"{i:04d}_{mode.replace(';', '').replace('+', '_')}_{size[0]}x{size[1]}.{ext}"
            path = os.path.join(args.out, name)
            if isinstance(image, bytes):
                with open(path, "wb") as f:
                    f.write(image)
            else:
                image.save(path)
            source = Image.open(path)
            assert source.mode == OPENS_AS.get(mode, mode), (name, source.mode)
            source = source.convert("RGB")
            nw, nh = resized_size(*size, resize, square)
            for filter_name, filt in FILTERS.items():
                resized = source.resize((nw, nh), filt)
                written = {}  # (left, top) -> offset: the roundings agree on even margins
                for rounding in ("half_even", "floor"):
                    if rounding == "half_even":  # torchvision's CenterCrop
                        top, left = int(round((nh - crop) / 2.0)), int(round((nw - crop) / 2.0))
                    else:  # Hugging Face's center_crop
                        top, left = (nh - crop) // 2, (nw - crop) // 2
                    if (left, top) not in written:
                        written[left, top] = expected.tell()
                        expected.write(chw(resized.crop((left, top, left + crop, top + crop))))
                    cases.append({
                        "file": name,
                        "mode": mode,
                        "width": size[0],
                        "height": size[1],
                        "resize": resize,
                        "crop": crop,
                        "square": square,
                        "filter": filter_name,
                        "rounding": rounding,
                        "offset": written[left, top],
                    })
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump({"pillow": Image.__version__, "seed": args.seed, "cases": cases}, f)


if __name__ == "__main__":
    main()
