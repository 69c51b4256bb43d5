#!/usr/bin/env python3
"""Model-only images/s of PyTorch on the CPU, the baseline users would pick,
for the same models and batch sizes as `cargo bench -p benches -- model`
and `pipeline bench --model-only --gpus cpu`.

    python3 scripts/bench_pytorch_models.py [--threads 2] [--seconds 10] [--models vit_b_16,clip_vit_b_32]
        [--runtime torch|onnxruntime]

Pre-made float32 tensors (no decoding), inference mode, warm-up excluded.
With `--runtime onnxruntime` the same PyTorch model is exported to ONNX
(opset 17, fixed batch; needs the `onnx` and `onnxruntime` packages) and
timed in an onnxruntime session with all graph optimisations and
`--threads` intra-op threads. Prints one Markdown row per (model, batch).
"""
import argparse
import os
import tempfile
import time

import torch
import torchvision


def lite0():
    from efficientnet_lite_pytorch import EfficientNet
    return EfficientNet.from_name("efficientnet-lite0")


class Tower(torch.nn.Module):
    """A transformers vision model returning its image embedding."""

    def __init__(self, model, output):
        super().__init__()
        self.model, self.output = model, output

    def forward(self, x):
        return getattr(self.model(pixel_values=x), self.output)


def clip_b32():
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection
    config = CLIPVisionConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                              patch_size=32, image_size=224, projection_dim=512)
    return Tower(CLIPVisionModelWithProjection(config), "image_embeds")


def siglip_b16():
    from transformers import SiglipVisionConfig, SiglipVisionModel
    return Tower(SiglipVisionModel(SiglipVisionConfig()), "pooler_output")


def dinov2(width, layers, heads):
    def make():
        from transformers import Dinov2Config, Dinov2Model
        config = Dinov2Config(hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                              patch_size=14, image_size=518)
        return Tower(Dinov2Model(config), "pooler_output")
    return make


def clip(patch, width, layers, heads, embed):
    def make():
        from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection
        config = CLIPVisionConfig(hidden_size=width, intermediate_size=4 * width, num_hidden_layers=layers,
                                  num_attention_heads=heads, patch_size=patch, image_size=224,
                                  projection_dim=embed)
        return Tower(CLIPVisionModelWithProjection(config), "image_embeds")
    return make


MODELS = {
    "resnet18": torchvision.models.resnet18,
    "resnet50": torchvision.models.resnet50,
    "efficientnet_lite0": lite0,
    "vit_b_16": torchvision.models.vit_b_16,
    "convnext_tiny": torchvision.models.convnext_tiny,
    "clip_vit_b_32": clip_b32,
    "clip_vit_b_16": clip(16, 768, 12, 12, 512),
    "clip_vit_l_14": clip(14, 1024, 24, 16, 768),
    "vit_b_32": torchvision.models.vit_b_32,
    "vit_l_16": torchvision.models.vit_l_16,
    "convnext_small": torchvision.models.convnext_small,
    "convnext_base": torchvision.models.convnext_base,
    "dinov2_vitl14": dinov2(1024, 24, 16),
    "siglip_base_patch16_224": siglip_b16,
    "dinov2_vits14": dinov2(384, 12, 6),
    "dinov2_vitb14": dinov2(768, 12, 12),
}


def onnxruntime_runner(model, x, threads, folder):
    """`x → model(x)` in an onnxruntime session of `model` exported to ONNX.
    Exported with autograd on: under inference mode torchvision's attention
    takes a fused fast path that ONNX cannot express."""
    import onnxruntime
    path = os.path.join(folder, "model.onnx")
    torch.onnx.export(model, (x,), path, input_names=["x"], opset_version=17, dynamo=False)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feed = {"x": x.numpy()}
    return lambda: session.run(None, feed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--models", default="resnet18,resnet50,efficientnet_lite0")
    ap.add_argument("--runtime", choices=["torch", "onnxruntime"], default="torch")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.runtime == "torch":
        runtime = f"PyTorch {torch.__version__}"
    else:
        import onnxruntime
        runtime = f"onnxruntime {onnxruntime.__version__}"
    print(f"| model | batch | {runtime} img/s ({args.threads} threads) |")
    print("|---|---|---|")
    for name in args.models.split(","):
        model = MODELS[name]().eval()
        for batch in [int(b) for b in args.batches.split(",")]:
            x = torch.randn(batch, 3, 224, 224)
            if args.runtime == "torch":
                run = lambda: model(x)  # noqa: E731
            else:
                with tempfile.TemporaryDirectory() as folder:
                    run = onnxruntime_runner(model, x, args.threads, folder)
            with torch.inference_mode():
                for _ in range(2):
                    run()
                n, start = 0, time.perf_counter()
                while time.perf_counter() - start < args.seconds or n < 3:
                    run()
                    n += 1
                elapsed = time.perf_counter() - start
            print(f"| {name} | {batch} | {n * batch / elapsed:.1f} |", flush=True)


if __name__ == "__main__":
    main()
