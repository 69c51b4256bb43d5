"""Crops of the sample photos as a model's own preprocessing config says,
for `loader/tests/it/config_crops.rs` (#41's preprocessing description,
`pipeline_core::spec_from_config`): each Hugging Face case is a real
image processor of transformers (its PIL one), saved with
`save_pretrained` as users' `preprocessor_config.json` is, then run on the
photo with rescaling and normalisation off, so its output is the exact
`uint8` crop; each timm case is a `config.json` as timm writes it to the
hub, run through timm's eval transform written out on PIL
(`floor(size / crop_pct)`, `Resize` of the shorter side or a squash to a
square, torchvision's `CenterCrop` rounding half to even; no torch
needed), as `make_upstream_crop_vectors.py` writes torchvision's.

Each case keeps its config (the JSON as saved), the crop's FNV-1a 64 of
its CHW bytes, and the statistics on 0..255 the processor normalises with.

    pip install transformers pillow numpy
    python scripts/make_config_crop_vectors.py samples > loader/tests/vectors/config_crops.json
"""

import json
import math
import pathlib
import sys
import tempfile

import numpy as np
from PIL import Image
from transformers import (
    BitImageProcessorPil,
    CLIPImageProcessorPil,
    ConvNextImageProcessorPil,
    SiglipImageProcessorPil,
    ViTImageProcessorPil,
)

OPENAI = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])
IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
HALF = ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])

# (name, processor): the processors of the hub's most used image models,
# at their sizes and at others, and every filter the loader has.
HF = [
    ("vit_224_bilinear", ViTImageProcessorPil(size={"height": 224, "width": 224}, resample=2)),
    ("vit_384_bicubic", ViTImageProcessorPil(size={"height": 384, "width": 384}, resample=3)),
    ("vit_96_nearest", ViTImageProcessorPil(size={"height": 96, "width": 96}, resample=0)),
    ("vit_100_box", ViTImageProcessorPil(size={"height": 100, "width": 100}, resample=4)),
    ("vit_128_lanczos", ViTImageProcessorPil(size={"height": 128, "width": 128}, resample=1)),
    (
        "convnext_224",
        ConvNextImageProcessorPil(
            size={"shortest_edge": 224}, crop_pct=0.875, resample=3,
            image_mean=IMAGENET[0], image_std=IMAGENET[1],
        ),
    ),
    (
        "convnext_288_crop_pct_0.95",
        ConvNextImageProcessorPil(size={"shortest_edge": 288}, crop_pct=0.95, resample=2),
    ),
    ("convnext_384", ConvNextImageProcessorPil(size={"shortest_edge": 384}, resample=3)),
    (
        "clip_224",
        CLIPImageProcessorPil(
            size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224},
            image_mean=OPENAI[0], image_std=OPENAI[1],
        ),
    ),
    (
        "clip_336",
        CLIPImageProcessorPil(
            size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336},
            image_mean=OPENAI[0], image_std=OPENAI[1],
        ),
    ),
    (
        "siglip_384",
        SiglipImageProcessorPil(size={"height": 384, "width": 384}, resample=3,
                                image_mean=HALF[0], image_std=HALF[1]),
    ),
    (
        "dinov2_bit_256_224",
        BitImageProcessorPil(
            size={"shortest_edge": 256}, crop_size={"height": 224, "width": 224}, resample=3,
            image_mean=IMAGENET[0], image_std=IMAGENET[1],
        ),
    ),
]

# (name, pretrained_cfg): timm's eval settings of common models and others.
TIMM = [
    ("timm_resnet50_a1", {"input_size": [3, 224, 224], "interpolation": "bicubic",
                          "crop_pct": 0.95, "crop_mode": "center"}),
    ("timm_vit_augreg", {"input_size": [3, 224, 224], "interpolation": "bicubic",
                         "crop_pct": 0.9, "crop_mode": "center",
                         "mean": HALF[0], "std": HALF[1]}),
    ("timm_default", {"input_size": [3, 224, 224]}),
    ("timm_eva_squash", {"input_size": [3, 336, 336], "interpolation": "bicubic",
                         "crop_pct": 1.0, "crop_mode": "squash",
                         "mean": OPENAI[0], "std": OPENAI[1]}),
    ("timm_squash_0.9", {"input_size": [3, 224, 224], "interpolation": "bilinear",
                         "crop_pct": 0.9, "crop_mode": "squash"}),
    ("timm_convnext_384", {"input_size": [3, 384, 384], "interpolation": "bicubic",
                           "crop_pct": 1.0, "crop_mode": "center"}),
]

FILTERS = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC,
           "lanczos": Image.LANCZOS, "box": Image.BOX}


def fnv64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def saved_config(processor) -> dict:
    """The processor's `preprocessor_config.json`, as `save_pretrained` writes it."""
    with tempfile.TemporaryDirectory() as d:
        processor.save_pretrained(d)
        return json.loads((pathlib.Path(d) / "preprocessor_config.json").read_text())


def hugging_face(img: Image.Image, processor) -> np.ndarray:
    pixels = processor(images=img, do_rescale=False, do_normalize=False,
                       return_tensors="np")["pixel_values"][0]
    assert np.array_equal(pixels, np.round(pixels)), "unscaled pixels are integers"
    return pixels.astype(np.uint8)


def timm(img: Image.Image, cfg: dict) -> np.ndarray:
    """timm's eval transform (`transforms_factory.transforms_imagenet_eval`)."""
    size = cfg["input_size"][1]
    pct = cfg.get("crop_pct", 0.875)
    scale = math.floor(size / pct)
    resample = FILTERS[cfg.get("interpolation", "bilinear")]
    w, h = img.size
    if cfg.get("crop_mode", "center") == "squash":
        nw, nh = scale, scale
    else:  # torchvision's `Resize(scale)`: the shorter side
        short, long = (w, h) if w <= h else (h, w)
        new_long = int(scale * long / short)
        nw, nh = (scale, new_long) if w <= h else (new_long, scale)
    resized = img.resize((nw, nh), resample)
    top = int(round((nh - size) / 2.0))
    left = int(round((nw - size) / 2.0))
    return np.asarray(resized.crop((left, top, left + size, top + size))).transpose(2, 0, 1)


def on_255(mean, std, rescale):
    return [m / rescale for m in mean], [s / rescale for s in std]


def main() -> None:
    cases = []
    photos = sorted(pathlib.Path(sys.argv[1]).glob("*.jpg"))
    for name, processor in HF:
        config = saved_config(processor)
        mean, std = on_255(processor.image_mean, processor.image_std, processor.rescale_factor)
        for photo in photos:
            img = Image.open(photo).convert("RGB")
            cases.append({"name": name, "source": "hugging_face", "config": config,
                          "photo": photo.name, "crop": fnv64(hugging_face(img, processor).tobytes()),
                          "mean": mean, "std": std})
    for name, cfg in TIMM:
        config = {"architecture": name, "num_classes": 7, "pretrained_cfg": cfg}
        mean, std = on_255(cfg.get("mean", IMAGENET[0]), cfg.get("std", IMAGENET[1]), 1 / 255)
        for photo in photos:
            img = Image.open(photo).convert("RGB")
            cases.append({"name": name, "source": "timm", "config": config,
                          "photo": photo.name, "crop": fnv64(timm(img, cfg).tobytes()),
                          "mean": mean, "std": std})
    print(json.dumps(cases, indent=1))


if __name__ == "__main__":
    main()
