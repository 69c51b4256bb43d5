"""Models exported by their upstreams for `cli/tests/onnx_upstream.rs`
(#41): seeded, small (a few hundred kB each), each in its own folder with
the files its upstream writes beside the weights, and the outputs
onnxruntime's Python API gives over the upstream's own preprocessing
(transformers' image processors and timm's transforms, on Pillow) of a
folder of photos-like images of many shapes.

    python -m venv target/torch-venv
    target/torch-venv/bin/pip install torch torchvision timm transformers onnx onnxruntime pillow==13.0.0
    target/torch-venv/bin/python scripts/make_onnx_upstream.py cli/tests/onnx_upstream

Folders:
- `hf_vit/`: transformers' ViTForImageClassification with three labels
  (`config.json` with `id2label`) and its ViTImageProcessor's
  `preprocessor_config.json` (both sides to 64 px, bilinear);
- `hf_dinov2/`: transformers' Dinov2Model, the pooled output as an
  embedding, and a BitImageProcessor (shorter side to 64, bicubic, a 56
  px crop);
- `timm_vit/`, `timm_convnext/`: timm models with a 7-class head and timm's
  hub `config.json` (`pretrained_cfg`: bicubic, crop_pct 0.9 / 0.95,
  `label_names` for the ConvNeXt);
- `hf_vit_external/`: `hf_vit/`'s model saved as large models are, its
  weights in an external-data file beside it (`model.onnx_data`), with the
  same config files: the same outputs as `hf_vit/`;
- `images/`: PNGs and a JPEG, tall, wide and square;
- `reference.json`: per model, per image (sorted by name), the output row.
"""

import json
import pathlib
import sys

import numpy as np
import onnxruntime as ort
import timm
import torch
import transformers
from PIL import Image

SEED = 41


def images(out: pathlib.Path) -> list[pathlib.Path]:
    """Smooth gradients with noise, so that resampling has edges to get
    wrong: sizes tall, wide and square, one JPEG."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    sizes = [(97, 131), (150, 80), (64, 64), (33, 200), (200, 41), (128, 96), (71, 71), (250, 180)]
    paths = []
    for i, (w, h) in enumerate(sizes):
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (w + h)], axis=-1)
        pixels = np.clip(base + rng.normal(0, 40, (h, w, 3)), 0, 255).astype(np.uint8)
        name = f"img_{i}.{'jpg' if i == 5 else 'png'}"
        Image.fromarray(pixels, "RGB").save(out / name, quality=90)
        paths.append(out / name)
    return sorted(paths)


def export(module: torch.nn.Module, size: int, path: pathlib.Path, output: str) -> None:
    module.eval()
    torch.onnx.export(
        module, (torch.zeros(2, 3, size, size),), str(path), dynamo=False,
        input_names=["pixel_values"], output_names=[output],
        dynamic_axes={"pixel_values": {0: "batch"}, output: {0: "batch"}}, opset_version=17)


def run(path: pathlib.Path, batch: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"pixel_values": batch.astype(np.float32)})[0]


class Pooled(torch.nn.Module):
    """A Hugging Face backbone's pooled output as the graph's one output."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).pooler_output


class Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).logits


def hf_vit(out: pathlib.Path, photos) -> list:
    out.mkdir(parents=True, exist_ok=True)
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        image_size=64, patch_size=16, num_labels=3,
        id2label={0: "cat", 1: "dog", 2: "red car"}, label2id={"cat": 0, "dog": 1, "red car": 2})
    model = transformers.ViTForImageClassification(config)
    model.config.save_pretrained(out)
    processor = transformers.ViTImageProcessorPil(size={"height": 64, "width": 64})
    processor.save_pretrained(out)
    export(Logits(model), 64, out / "model.onnx", "logits")
    batch = processor([Image.open(p) for p in photos], return_tensors="np")["pixel_values"]
    return run(out / "model.onnx", batch).tolist()


def hf_dinov2(out: pathlib.Path, photos) -> list:
    out.mkdir(parents=True, exist_ok=True)
    config = transformers.Dinov2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
        image_size=56, patch_size=14)
    model = transformers.Dinov2Model(config)
    processor = transformers.BitImageProcessorPil(
        size={"shortest_edge": 64}, crop_size={"height": 56, "width": 56}, do_center_crop=True,
        resample=3, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225],
        do_convert_rgb=True)
    processor.save_pretrained(out)
    export(Pooled(model), 56, out / "model.onnx", "embedding")
    batch = processor([Image.open(p) for p in photos], return_tensors="np")["pixel_values"]
    return run(out / "model.onnx", batch).tolist()


def timm_model(out: pathlib.Path, photos, name, model_args, pretrained_cfg, labels=None) -> list:
    """timm's model `name` with `model_args`, its config saved as timm's
    hub export writes it (`save_config_for_hf`) with `pretrained_cfg`."""
    out.mkdir(parents=True, exist_ok=True)
    model = timm.create_model(name, pretrained=False, num_classes=7, **model_args)
    model.pretrained_cfg = {**model.pretrained_cfg, **pretrained_cfg}
    model.eval()
    timm.models._hub.save_config_for_hf(model, str(out / "config.json"))
    config = json.loads((out / "config.json").read_text())
    if labels is not None:
        config["label_names"] = labels
    (out / "config.json").write_text(json.dumps(config, indent=2))
    size = pretrained_cfg["input_size"][1]
    export(model, size, out / "model.onnx", "logits")
    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))
    batch = torch.stack([transform(Image.open(p).convert("RGB")) for p in photos]).numpy()
    return run(out / "model.onnx", batch).tolist()


def external_copy(source: pathlib.Path, out: pathlib.Path) -> None:
    """`source`'s model with every initializer over 1 kB in `model.onnx_data`
    beside it, as `torch.onnx` and `onnx` save a model over 2 GB."""
    import onnx
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    model = onnx.load(source / "model.onnx")
    (out / "model.onnx_data").unlink(missing_ok=True)
    onnx.save_model(model, out / "model.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.onnx_data",
                    size_threshold=1024)
    for config in ["config.json", "preprocessor_config.json"]:
        shutil.copyfile(source / config, out / config)


def main(out: pathlib.Path) -> None:
    torch.manual_seed(SEED)
    photos = images(out / "images")
    reference = {"images": [p.name for p in photos]}
    reference["hf_vit"] = hf_vit(out / "hf_vit", photos)
    external_copy(out / "hf_vit", out / "hf_vit_external")
    reference["hf_dinov2"] = hf_dinov2(out / "hf_dinov2", photos)
    statistics = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}
    reference["timm_vit"] = timm_model(
        out / "timm_vit", photos, "vit_tiny_patch16_224",
        {"img_size": 48, "embed_dim": 32, "depth": 2, "num_heads": 2, "mlp_ratio": 2},
        {"input_size": (3, 48, 48), "interpolation": "bicubic", "crop_pct": 0.9,
         "crop_mode": "center", **statistics})
    reference["timm_convnext"] = timm_model(
        out / "timm_convnext", photos, "convnext_atto",
        {"depths": (1, 1, 1, 1), "dims": (8, 16, 32, 64)},
        {"input_size": (3, 64, 64), "interpolation": "bilinear", "crop_pct": 0.95,
         "crop_mode": "center", "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)},
        labels=[f"class {i}" for i in range(7)])
    (out / "reference.json").write_text(json.dumps(reference))


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
