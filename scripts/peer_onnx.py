#!/usr/bin/env python3
"""The peer of `pipeline … --model FILE.onnx` on the CPU (#41): what a user
writes instead, onnxruntime's Python API.

    python3 scripts/peer_onnx.py --onnx M.onnx --model-only [--batch 32] [--seconds 20]
    python3 scripts/peer_onnx.py --onnx M.onnx --data DIR [--batch 32] [--resize 256 --crop 224]

`--model-only`: pre-made float32 batches, one session with all graph
optimisations and as many intra-op threads as cores, warm-up excluded;
prints images/s. `--data`: every image of the folder in name order through
Pillow (RGB, the shorter side to `--resize` bilinear as torchvision
computes it, a centre crop, ImageNet's mean and std) in a thread pool of
as many threads as cores, batches of `--batch` through the session, the
rows to an .npy; prints images, seconds, images/s.
`scripts/bench_onnx.sh` interleaves both with `pipeline`.
"""
import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def session(path, threads):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    s = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return s, s.get_inputs()[0].name


def preprocess(path, resize, crop):
    """torchvision's Resize(resize) + CenterCrop(crop) + ToTensor + Normalize
    on a PIL image, in numpy."""
    image = Image.open(path).convert("RGB")
    w, h = image.size
    if w <= h:
        size = (resize, int(resize * h / w))
    else:
        size = (int(resize * w / h), resize)
    image = image.resize(size, Image.BILINEAR)
    left = int(round((size[0] - crop) / 2.0))
    top = int(round((size[1] - crop) / 2.0))
    image = image.crop((left, top, left + crop, top + crop))
    x = (np.asarray(image, np.float32) / 255.0 - MEAN) / STD
    return x.transpose(2, 0, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--model-only", action="store_true")
    ap.add_argument("--data")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--resize", type=int, default=256)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=os.devnull)
    args = ap.parse_args()
    s, name = session(args.onnx, args.threads)
    if args.model_only:
        x = np.random.default_rng(0).standard_normal(
            (args.batch, 3, args.crop, args.crop)).astype(np.float32)
        s.run(None, {name: x})
        images, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            s.run(None, {name: x})
            images += args.batch
        print(f"{images / (time.perf_counter() - start):.2f}")
        return
    start = time.perf_counter()
    files = sorted(os.path.join(args.data, f) for f in os.listdir(args.data))
    rows = []
    with ThreadPoolExecutor(args.threads) as pool:
        pixels = pool.map(lambda p: preprocess(p, args.resize, args.crop), files)
        batch = []
        for x in pixels:
            batch.append(x)
            if len(batch) == args.batch:
                rows.append(s.run(None, {name: np.stack(batch)})[0])
                batch = []
        if batch:
            rows.append(s.run(None, {name: np.stack(batch)})[0])
    if args.out != os.devnull:
        np.save(args.out, np.concatenate(rows))
    seconds = time.perf_counter() - start
    print(f"{len(files)} images, {seconds:.2f} s, {len(files) / seconds:.2f} images/s")


if __name__ == "__main__":
    main()
