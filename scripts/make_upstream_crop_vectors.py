"""Centre crops of the sample photos as each upstream preprocesses them,
for `loader/tests/it/upstream_crops.rs`: torchvision's `Resize` + `CenterCrop`
(what open_clip, torchvision and torch-hub DINOv2 checkpoints are used
with) and Hugging Face's image processors (what HF-layout CLIP, SigLIP and
DINOv2 checkpoints are used with). The two round an odd crop margin
differently: torchvision half to even, HF down.

Each crop is stored as FNV-1a 64 of its CHW uint8 bytes, what the loader
writes. HF's processors here are its PIL ones (`CLIPImageProcessor` and
`BitImageProcessor` in transformers 4, `...ImageProcessorPil` in 5): the
torchvision-backed "fast" processors resize tensors, which no Pillow-exact
loader reproduces. torchvision's two transforms are written out (PIL
`resize`, Python's `round`) so that no torch is needed.

    pip install transformers pillow numpy
    python scripts/make_upstream_crop_vectors.py samples > loader/tests/vectors/upstream_crops.json
"""

import json
import pathlib
import sys

import numpy as np
from PIL import Image

try:  # transformers 5
    from transformers import BitImageProcessorPil as Bit
    from transformers import CLIPImageProcessorPil as Clip
except ImportError:  # transformers 4: the PIL processors are the default
    from transformers import BitImageProcessor as Bit
    from transformers import CLIPImageProcessor as Clip

# (model, resize of the shorter side, crop): bicubic, as both upstreams use.
MODELS = [("clip_vit_b_32", 224, 224), ("dinov2_vitb14", 256, 224)]


def fnv64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def torchvision(img: Image.Image, size: int, crop: int) -> np.ndarray:
    """`Resize(size, BICUBIC)` then `CenterCrop(crop)` on a PIL image."""
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_long = int(size * long / short)
    nw, nh = (size, new_long) if w <= h else (new_long, size)
    resized = img.resize((nw, nh), Image.BICUBIC)
    top = int(round((nh - crop) / 2.0))
    left = int(round((nw - crop) / 2.0))
    return np.asarray(resized.crop((left, top, left + crop, top + crop))).transpose(2, 0, 1)


def hugging_face(img: Image.Image, model: str, size: int, crop: int) -> np.ndarray:
    cls = Clip if model.startswith("clip") else Bit
    processor = cls(
        size={"shortest_edge": size},
        crop_size={"height": crop, "width": crop},
        resample=3,
        do_rescale=False,
        do_normalize=False,
    )
    pixels = processor(images=img, return_tensors="np")["pixel_values"][0]
    assert np.array_equal(pixels, np.round(pixels)), "unscaled pixels are integers"
    return pixels.astype(np.uint8)


def main() -> None:
    cases = []
    for photo in sorted(pathlib.Path(sys.argv[1]).glob("*.jpg")):
        img = Image.open(photo).convert("RGB")
        for model, size, crop in MODELS:
            cases.append(
                {
                    "photo": photo.name,
                    "model": model,
                    "width": img.size[0],
                    "height": img.size[1],
                    "torchvision": fnv64(torchvision(img, size, crop).tobytes()),
                    "hugging_face": fnv64(hugging_face(img, model, size, crop).tobytes()),
                }
            )
    print(json.dumps(cases, indent=1))


if __name__ == "__main__":
    main()
