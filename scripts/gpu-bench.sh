#!/usr/bin/env bash
# GPU benchmark kit: `pipeline bench` on GPU 0 (the model alone, and the
# whole pipeline on generated photos) and PyTorch on the same GPU and the
# same kind of input, written as BENCHMARKS.md rows.
#
#   PIPELINE=target/release/pipeline bash scripts/gpu-bench.sh OUT_DIR
#
# Needs: an NVIDIA GPU with its Vulkan ICD (the container must have the
# `graphics` driver capability), the Vulkan loader (libvulkan1), and python3
# with torch, torchvision and transformers for the PyTorch side.
# Settings (environment): MODELS (default resnet50,vit_b_16,clip_vit_b_32),
# BATCHES (default 32,128), SYNTHETIC (images for end to end, default 2048;
# 0 skips it), REPEAT (default 3), PRECISIONS (default f32,f16), TORCH
# (default 1; 0 skips the PyTorch side), GPUS (default 0; `cpu` runs the
# kit's pipeline side on the CPU, to try the script on a machine without a GPU).
#
# Precision: each `pipeline` row names its `--precision`; compare its f32
# rows with PyTorch's strict f32 row and its f16 rows with PyTorch's f16
# autocast row (what users of PyTorch on GPUs run).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-bench}
pipeline=${PIPELINE:-target/release/pipeline}
models=${MODELS:-resnet50,vit_b_16,clip_vit_b_32}
batches=${BATCHES:-32,128}
synthetic=${SYNTHETIC:-2048}
repeat=${REPEAT:-3}
precisions=${PRECISIONS:-f32,f16}
torch=${TORCH:-1}
gpus=${GPUS:-0}
mkdir -p "$out"

"$pipeline" devices | tee "$out/devices.txt"
if [[ $gpus != cpu ]] && ! awk '$1 ~ /^(gpu:)?0$/ { found = 1 } END { exit !found }' "$out/devices.txt"; then
    echo "gpu-bench.sh: pipeline sees no Vulkan GPU (see pipeline devices above)" >&2
    exit 2
fi

for model in ${models//,/ }; do
    for precision in ${precisions//,/ }; do
        echo "gpu-bench.sh: $model $precision, model only" >&2
        "$pipeline" bench --model-only --gpus "$gpus" --model "$model" --precision "$precision" \
            --batches 20 --repeat "$repeat" --sweep "batch=$batches" \
            --json "$out/$model-$precision-model-only.json" --quiet \
            > "$out/$model-$precision-model-only.md"
        if ((synthetic > 0)); then
            echo "gpu-bench.sh: $model $precision, end to end on $synthetic generated photos" >&2
            "$pipeline" bench --synthetic "$synthetic" --gpus "$gpus" --model "$model" \
                --precision "$precision" --repeat "$repeat" --sweep "batch=$batches" \
                --json "$out/$model-$precision-end-to-end.json" --quiet \
                > "$out/$model-$precision-end-to-end.md"
        fi
    done
done

if ((torch)); then
    echo "gpu-bench.sh: PyTorch" >&2
    python3 scripts/bench_pytorch_gpu.py --models "$models" --batches "$batches" | tee "$out/pytorch.md"
fi

python3 - "$out" "$models" "$precisions" <<'EOF' | tee "$out/rows.md"
import json, os, sys
out, models, precisions = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
print("| model | precision | batch | mode | pipeline img/s (median, min–max) |")
print("|---|---|---|---|---|")
for model in models:
    for precision in precisions:
        for mode in ("model-only", "end-to-end"):
            path = os.path.join(out, f"{model}-{precision}-{mode}.json")
            if not os.path.exists(path):
                continue
            report = json.load(open(path))
            for point in report["sweep"]:
                spread = point["spread"]
                print(f"| {model} | {precision} | {point['batch']} | {mode} | "
                      f"{point['images_per_s']:.1f} ({spread['min']:.1f}–{spread['max']:.1f}) |")
EOF
echo "gpu-bench.sh: rows in $out/rows.md and $out/pytorch.md" >&2
