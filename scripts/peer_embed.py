#!/usr/bin/env python3
"""The peer of `pipeline infer --gpus cpu` end to end (#29 item 5): what a
user writes instead. open_clip's (or torchvision's) own preprocessing on
PIL images in a thread pool, the model in torch with as many threads, at
batch 32, embeddings of every image of a folder in name order to an .npy.

    python3 scripts/peer_embed.py --model clip_vit_b_32 --data DIR \
        [--weights open_clip.bin] [--threads 2] [--out emb.npy]

`--model resnet50` runs torchvision's ResNet-50 with its eval transform
(the pooled 2048-wide features). Prints one line: images, seconds,
images per second. `scripts/bench_cpu_e2e.sh` interleaves it with
`pipeline infer` on the same files.
"""
import argparse
import glob
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from PIL import Image


def clip_vit_b_32(weights):
    import open_clip
    model, _, preprocess = open_clip.create_model_and_transforms("ViT-B-32-quickgelu")
    if weights:
        open_clip.load_checkpoint(model, weights)
    model.eval()
    return model.encode_image, preprocess


def resnet50(weights):
    import torchvision
    import torchvision.transforms as T
    model = torchvision.models.resnet50()
    if weights:
        model.load_state_dict(torch.load(weights, map_location="cpu"))
    model.fc = torch.nn.Identity()
    preprocess = T.Compose([
        T.Resize(256), T.CenterCrop(224), T.ToTensor(),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    return model, preprocess


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["clip_vit_b_32", "resnet50"], required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--weights")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    encode, preprocess = {"clip_vit_b_32": clip_vit_b_32, "resnet50": resnet50}[args.model](args.weights)
    if hasattr(encode, "eval"):
        encode.eval()
    paths = sorted(glob.glob(os.path.join(args.data, "*")))
    load = lambda p: preprocess(Image.open(p).convert("RGB"))  # noqa: E731
    out = []
    with ThreadPoolExecutor(args.threads) as pool, torch.inference_mode():
        crops = pool.map(load, paths)
        batch = []
        for crop in crops:
            batch.append(crop)
            if len(batch) == args.batch:
                out.append(encode(torch.stack(batch)).numpy())
                batch = []
        if batch:
            out.append(encode(torch.stack(batch)).numpy())
    seconds = time.perf_counter() - started
    if args.out:
        np.save(args.out, np.concatenate(out))
    print(f"{len(paths)} images {seconds:.2f} s {len(paths) / seconds:.2f} img/s")


if __name__ == "__main__":
    main()
