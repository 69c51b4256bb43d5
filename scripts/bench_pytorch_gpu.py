#!/usr/bin/env python3
"""Model-only images/s of PyTorch on a CUDA GPU, for the same models and
batch sizes as `pipeline bench --model-only` in scripts/gpu-bench.sh.

    python3 scripts/bench_pytorch_gpu.py [--models resnet50,vit_b_16,clip_vit_b_32]
                                         [--batches 32,128] [--seconds 5]
                                         [--precisions f32,f16,f16-tuned]
                                         [--json OUT.json] [--device cuda]
                                         [--profile STEPS]

Pre-made uint8 batches on the GPU, normalised there as the tool does, then
the model; CUDA events around each timed run, warm-up excluded. Three ways
of running it:
- `f32`: strict float32 (TF32 off for matmuls and convolutions, what the
  tool's f32 computes);
- `f16`: float16 autocast, eager, NCHW: what most PyTorch users run;
- `f16-tuned`: the same as a tuned user runs it: `channels_last` model and
  input, `torch.backends.cudnn.benchmark = True` (#28's second baseline).
Random weights: speed does not depend on their values. Prints one Markdown
row per (model, batch, way), and with --json writes them as a list of
{model, batch, precision, images_per_s, gpu, torch}. `--device cpu` runs the
same code on the CPU (f32 only), to try the script without a GPU.
`--profile STEPS` also prints, per (model, batch, way), the GPU kernels of
STEPS runs after the timed ones under torch.profiler (name, calls, total
and share of GPU time), the table #40's kit sets beside ncu's of
`pipeline bench --model-only --engine cuda`.
"""
import argparse
import json
import time

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
    "clip_vit_l_14": lambda: clip_tower(14, 1024, 24, 16, 768),
    "dinov2_vitb14": lambda: dinov2(768, 12, 12),
    "dinov2_vitl14": lambda: dinov2(1024, 24, 16),
}


def make_step(forward, batch, autocast, channels_last, device):
    u8 = torch.randint(0, 256, (batch, 3, 224, 224), dtype=torch.uint8, device=device)
    mean = torch.tensor([123.7, 116.3, 103.5], device=device).reshape(1, 3, 1, 1)
    std = torch.tensor([58.4, 57.1, 57.4], device=device).reshape(1, 3, 1, 1)
    layout = torch.channels_last if channels_last else torch.contiguous_format

    def step():
        with torch.autocast(device, dtype=torch.float16, enabled=autocast):
            x = ((u8.float() - mean) / std).contiguous(memory_format=layout)
            return forward(x)

    return step


def images_per_s(forward, batch, seconds, autocast, channels_last, device):
    step = make_step(forward, batch, autocast, channels_last, device)
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with torch.inference_mode():
        # cudnn.benchmark tries its algorithms on the first calls of a shape.
        for _ in range(5 if channels_last else 3):
            step()
        sync()
        runs, elapsed = 0, 0.0
        while elapsed < seconds * 1000 or runs < 5:
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            else:
                began = time.perf_counter()
            for _ in range(5):
                step()
            if cuda:
                end.record()
                sync()
                elapsed += start.elapsed_time(end)
            else:
                elapsed += (time.perf_counter() - began) * 1000
            runs += 5
    return runs * batch / (elapsed / 1000)


def kernel_table(forward, batch, autocast, channels_last, device, steps):
    """The GPU kernels of `steps` runs (after the timed ones, so warm):
    Markdown rows of name, calls, total ms and share, the largest first."""
    from torch.profiler import ProfilerActivity, profile

    step = make_step(forward, batch, autocast, channels_last, device)
    activity = ProfilerActivity.CUDA if device == "cuda" else ProfilerActivity.CPU
    with torch.inference_mode():
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        with profile(activities=[activity]) as prof:
            for _ in range(steps):
                step()
            if device == "cuda":
                torch.cuda.synchronize()
    totals = {}
    for event in prof.events():
        if device == "cuda" and event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        took = event.time_range.elapsed_us()
        calls, total = totals.get(event.name, (0, 0.0))
        totals[event.name] = (calls + 1, total + took)
    whole = sum(total for _, total in totals.values()) or 1.0
    lines = [f"GPU time of {steps} runs: {whole / 1000:.2f} ms ({whole / 1000 / steps:.2f} ms a run)",
             "| kernel | calls a run | ms a run | share |", "|---|---|---|---|"]
    for name, (calls, total) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:30]:
        lines.append(f"| {name[:110]} | {calls / steps:g} | {total / 1000 / steps:.3f} | {100 * total / whole:.1f}% |")
    return "\n".join(lines)


# (autocast, channels_last + cudnn.benchmark) per way of running.
WAYS = {"f32": (False, False), "f16": (True, False), "f16-tuned": (True, True)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="32,128")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--precisions", default="f32,f16,f16-tuned")
    ap.add_argument("--json")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--profile", type=int, default=0, metavar="STEPS")
    args = ap.parse_args()
    ways = args.precisions.split(",")
    for way in ways:
        if way not in WAYS:
            ap.error(f"--precisions {way}: expected one of {', '.join(WAYS)}")
    if args.device != "cuda" and ways != ["f32"]:
        ap.error("--device cpu runs --precisions f32 only")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"| model | batch | precision | PyTorch {torch.__version__} img/s on {gpu} |")
    print("|---|---|---|---|")
    rows = []
    for name in args.models.split(","):
        forward, module = MODELS[name]()
        module.eval().to(args.device)
        for batch in [int(b) for b in args.batches.split(",")]:
            for way in ways:
                autocast, tuned = WAYS[way]
                torch.backends.cudnn.benchmark = tuned
                module.to(memory_format=torch.channels_last if tuned else torch.contiguous_format)
                rate = images_per_s(forward, batch, args.seconds, autocast, tuned, args.device)
                print(f"| {name} | {batch} | {way} | {rate:.1f} |", flush=True)
                rows.append({"model": name, "batch": batch, "precision": way,
                             "images_per_s": rate, "gpu": gpu, "torch": torch.__version__})
                if args.profile:
                    print(f"\n### {name}, batch {batch}, {way}\n", flush=True)
                    print(kernel_table(forward, batch, autocast, tuned, args.device, args.profile) + "\n",
                          flush=True)
        del module, forward
        if args.device == "cuda":
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
