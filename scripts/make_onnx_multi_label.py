"""Classifiers scored with a sigmoid, exported by optimum for
`cli/tests/it/onnx/scores.rs`: a transformers ViT with
`problem_type: multi_label_classification` and four labels, and one with
a single logit (`num_labels` 1, no `problem_type`), each seeded and small
(a few hundred kB), exported by `optimum-onnx`'s `main_export` (what
`optimum-cli export onnx --task image-classification` runs) into its own
folder as optimum lays it out: `model.onnx`, with the model's
`config.json` and its image processor's `preprocessor_config.json` beside
it. Beside them, `reference.json`: per image of
`cli/tests/onnx_upstream/images/` (sorted by name), the logits the PyTorch
model gives over its PIL image processor, and each class's score as
transformers' image-classification pipeline gives it (`top_k=None`; a
sigmoid for both heads), in class order.

optimum-onnx pins transformers below 4.58, so it goes in a venv of its own
that sees the system's torch:

    python3 -m venv --system-site-packages target/optimum-venv
    target/optimum-venv/bin/pip install optimum-onnx
    target/optimum-venv/bin/python scripts/make_onnx_multi_label.py cli/tests/onnx_upstream
"""

import json
import pathlib
import sys
import tempfile

import numpy as np
import onnxruntime as ort
import torch
import transformers
from optimum.exporters.onnx import main_export
from PIL import Image

SEED = 41
SIZE = 32
# The head's weights times this: logits of a few units.
SPREAD = 20.0


def classifier(out: pathlib.Path, photos, **head) -> dict:
    """A ViT classifier with `head`'s config (labels, problem type),
    exported by optimum to `out`; the reference over `photos`."""
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        image_size=SIZE, patch_size=8, **head)
    model = transformers.ViTForImageClassification(config).eval()
    # A freshly initialised head's logits are all near 0 (every sigmoid
    # near 0.5): spread them so that the scores tell sigmoid from softmax
    # and the classes have a clear order.
    with torch.no_grad():
        model.classifier.weight.mul_(SPREAD)
    processor = transformers.ViTImageProcessor(
        size={"height": SIZE, "width": SIZE}, resample=2, image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5])
    with tempfile.TemporaryDirectory() as saved:
        model.save_pretrained(saved)
        processor.save_pretrained(saved)
        main_export(saved, output=out, task="image-classification", opset=17, device="cpu",
                    do_validation=False)
    images = [Image.open(p).convert("RGB") for p in photos]
    pixels = processor(images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        logits = model(pixel_values=pixels).logits.numpy().astype(np.float64)
    # The export computes what the model does.
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    exported = session.run(None, {"pixel_values": pixels.numpy()})[0]
    assert np.allclose(exported, logits, atol=1e-4), np.abs(exported - logits).max()
    pipeline = transformers.pipeline(
        "image-classification", model=model, image_processor=processor, top_k=None,
        device="cpu")
    index = {name: int(i) for i, name in model.config.id2label.items()}
    scores = []
    for found in pipeline(images):
        row = [0.0] * model.config.num_labels
        for entry in found:
            row[index[entry["label"]]] = float(entry["score"])
        scores.append(row)
    # Both heads are the pipeline's sigmoid cases.
    assert np.allclose(scores, 1 / (1 + np.exp(-logits)), atol=1e-6)
    reference = {
        "images": [p.name for p in photos],
        "labels": [model.config.id2label[i] for i in range(model.config.num_labels)],
        "logits": logits.tolist(),
        "scores": scores,
    }
    (out / "reference.json").write_text(json.dumps(reference, indent=1))
    return reference


def main(upstream: pathlib.Path) -> None:
    torch.manual_seed(SEED)
    photos = sorted((upstream / "images").iterdir())
    labels = ["cat", "dog", "outdoors", "blurry"]
    classifier(
        upstream / "hf_vit_multi_label", photos, num_labels=4,
        id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)},
        problem_type="multi_label_classification")
    classifier(upstream / "hf_vit_one_logit", photos, num_labels=1)


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
