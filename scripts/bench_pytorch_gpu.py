#!/usr/bin/env python3
"""Model-only images/s of PyTorch on a CUDA GPU, for the same models and
batch sizes as `pipeline bench --model-only` in scripts/gpu-bench.sh.

    python3 scripts/bench_pytorch_gpu.py [--models resnet50,vit_b_16,clip_vit_b_32]
                                         [--batches 32,128] [--seconds 5]

Pre-made uint8 batches on the GPU, normalised there as the tool does, then
the model; CUDA events around each timed run, warm-up excluded. Two
precisions: strict float32 (TF32 off for matmuls and convolutions, what the
tool's f32 computes) and float16 autocast (what PyTorch users run on GPUs).
Random weights: speed does not depend on their values. Prints one Markdown
row per (model, batch, precision).
"""
import argparse

import torch
import torchvision


def clip_tower(patch, width, layers, heads, embed):
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    config = CLIPVisionConfig(hidden_size=width, intermediate_size=4 * width, num_hidden_layers=layers,
                              num_attention_heads=heads, patch_size=patch, image_size=224,
                              projection_dim=embed)
    model = CLIPVisionModelWithProjection(config)
    return lambda x: model(pixel_values=x).image_embeds, model


def dinov2(width, layers, heads):
    from transformers import Dinov2Config, Dinov2Model

    model = Dinov2Model(Dinov2Config(hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                                     patch_size=14, image_size=518))
    return lambda x: model(pixel_values=x).pooler_output, model


def torchvision_model(name):
    model = getattr(torchvision.models, name)()
    return model, model


MODELS = {
    "resnet50": lambda: torchvision_model("resnet50"),
    "vit_b_16": lambda: torchvision_model("vit_b_16"),
    "convnext_tiny": lambda: torchvision_model("convnext_tiny"),
    "clip_vit_b_32": lambda: clip_tower(32, 768, 12, 12, 512),
    "dinov2_vitb14": lambda: dinov2(768, 12, 12),
}


def images_per_s(forward, batch, seconds, autocast):
    u8 = torch.randint(0, 256, (batch, 3, 224, 224), dtype=torch.uint8, device="cuda")
    mean = torch.tensor([123.7, 116.3, 103.5], device="cuda").reshape(1, 3, 1, 1)
    std = torch.tensor([58.4, 57.1, 57.4], device="cuda").reshape(1, 3, 1, 1)

    def step():
        with torch.autocast("cuda", dtype=torch.float16, enabled=autocast):
            return forward((u8.float() - mean) / std)

    with torch.inference_mode():
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        runs, elapsed = 0, 0.0
        while elapsed < seconds * 1000 or runs < 5:
            start.record()
            for _ in range(5):
                step()
            end.record()
            torch.cuda.synchronize()
            elapsed += start.elapsed_time(end)
            runs += 5
    return runs * batch / (elapsed / 1000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="32,128")
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gpu = torch.cuda.get_device_name()
    print(f"| model | batch | precision | PyTorch {torch.__version__} img/s on {gpu} |")
    print("|---|---|---|---|")
    for name in args.models.split(","):
        forward, module = MODELS[name]()
        module.eval().cuda()
        for batch in [int(b) for b in args.batches.split(",")]:
            for precision, autocast in (("f32", False), ("f16 autocast", True)):
                rate = images_per_s(forward, batch, args.seconds, autocast)
                print(f"| {name} | {batch} | {precision} | {rate:.1f} |", flush=True)
        del module, forward
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
