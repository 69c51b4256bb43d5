#!/usr/bin/env python3
"""Model-only images/s of PyTorch on the CPU, the baseline users would pick,
for the same models and batch sizes as `cargo bench -p benches -- model`.

    python3 scripts/bench_pytorch_models.py [--threads 2] [--seconds 10]

Pre-made float32 tensors (no decoding), inference mode, warm-up excluded.
Prints one Markdown row per (model, batch).
"""
import argparse
import time

import torch
import torchvision


def lite0():
    from efficientnet_lite_pytorch import EfficientNet
    return EfficientNet.from_name("efficientnet-lite0")


MODELS = {
    "resnet18": torchvision.models.resnet18,
    "resnet50": torchvision.models.resnet50,
    "efficientnet_lite0": lite0,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--batches", default="1,8,32")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"| model | batch | PyTorch {torch.__version__} img/s ({args.threads} threads) |")
    print("|---|---|---|")
    for name, make in MODELS.items():
        model = make().eval()
        for batch in [int(b) for b in args.batches.split(",")]:
            x = torch.randn(batch, 3, 224, 224)
            with torch.inference_mode():
                for _ in range(2):
                    model(x)
                n, start = 0, time.perf_counter()
                while time.perf_counter() - start < args.seconds or n < 3:
                    model(x)
                    n += 1
                elapsed = time.perf_counter() - start
            print(f"| {name} | {batch} | {n * batch / elapsed:.1f} |", flush=True)


if __name__ == "__main__":
    main()
