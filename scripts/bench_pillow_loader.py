#!/usr/bin/env python3
"""Per-core decode+preprocess throughput of what users would pick instead:
Pillow + torchvision's eval transform (`Resize(256)`, `CenterCrop(224)`, then
to a uint8 CHW array), with and without Pillow's draft mode (libjpeg-turbo's
reduced-DCT decode). Compare with `cargo bench -p benches -- decode_preprocess`.

    python3 scripts/bench_pillow_loader.py [--seconds 5]

It writes the same synthetic JPEGs as the criterion bench (fixtures'
`jpeg_photo`, via `cargo run --release -p fixtures --bin make-fixtures`
is not needed: the files are passed with --files), or, by default, makes
photo-like JPEGs of the bench sizes with Pillow itself.
"""
import argparse
import glob
import io
import os
import time

import numpy as np
from PIL import Image

try:
    import torchvision.transforms as T

    TRANSFORM = T.Compose([T.Resize(256), T.CenterCrop(224)])
    WHAT = "Pillow + torchvision"
except ImportError:  # the same Pillow calls torchvision makes, written out

    def TRANSFORM(im, size=256, crop=224):
        w, h = im.size
        short, long = (w, h) if w <= h else (h, w)
        nw, nh = (size, int(size * long / short)) if w <= h else (int(size * long / short), size)
        im = im.resize((nw, nh), Image.Resampling.BILINEAR)
        top, left = int(round((nh - crop) / 2.0)), int(round((nw - crop) / 2.0))
        return im.crop((left, top, left + crop, top + crop))

    WHAT = "Pillow (torchvision's calls written out)"


def make(width, height, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.stack([
        128 + 100 * np.sin(x / (17 + seed)) * np.cos(y / 23),
        128 + 100 * np.cos((x + y) / 31),
        255 * x / width,
    ], axis=-1) + rng.normal(0, 6, (height, width, 3))
    buf = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def load(data, draft):
    im = Image.open(io.BytesIO(data))
    if draft:
        im.draft("RGB", (256, 256))
    im = im.convert("RGB")
    return np.asarray(TRANSFORM(im)).transpose(2, 0, 1).copy()


def measure(files, draft, seconds):
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        load(files[n % len(files)], draft)
        n += 1
    return n / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--files", help="glob of JPEGs to use instead of generated ones")
    args = ap.parse_args()
    sets = {}
    if args.files:
        sets["files"] = [open(f, "rb").read() for f in sorted(glob.glob(args.files))]
    else:
        sets["small_500x375"] = [make(500, 375, s) for s in range(8)]
        sets["large_4032x3024"] = [make(4032, 3024, s) for s in range(2)]
    print(f"| set | mode | {WHAT} {Image.__version__} img/s (1 core) | MP/s |")
    print("|---|---|---|---|")
    for name, files in sets.items():
        mp = np.mean([np.prod(Image.open(io.BytesIO(f)).size) for f in files]) / 1e6
        for mode, draft in [("full", False), ("draft", True)]:
            rate = measure(files, draft, args.seconds)
            print(f"| {name} | {mode} | {rate:.1f} | {rate * mp:.1f} |", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
