#!/usr/bin/env bash
# GPU benchmark kit (#28): `pipeline bench` on GPU 0 with each engine (the
# model alone, and the whole pipeline on generated photos) and PyTorch on
# the same GPU and the same kind of input, two ways (eager f16 autocast,
# and tuned: channels_last + cudnn.benchmark), written as BENCHMARKS.md
# rows with the ratios of #28's targets.
#
#   PIPELINE=target/release/pipeline bash scripts/gpu-bench.sh OUT_DIR
#
# One part per device call (each fits in 10 minutes): run it once per
# model, `MODELS=resnet50 bash scripts/gpu-bench.sh OUT`, then
# `MODELS=clip_vit_l_14 …` and so on into the same OUT; every call rewrites
# OUT/rows.md from all the reports OUT holds.
#
# Needs: an NVIDIA GPU with its Vulkan ICD (the container must have the
# `graphics` driver capability), the Vulkan loader (libvulkan1), for the
# CUDA engine NVIDIA's libraries (`pipeline devices` lists them), and
# python3 with torch, torchvision and transformers for the PyTorch side.
# Settings (environment): MODELS (default resnet50,vit_b_16,clip_vit_b_32,
# clip_vit_l_14,dinov2_vitl14), ENGINES (default vulkan,cuda), BATCHES
# (default 128), SYNTHETIC (images for end to end, default 2048; 0 skips
# it), REPEAT (default 3), PRECISIONS (default f16; f32 adds strict f32
# rows), TORCH (default 1; 0 skips the PyTorch side), GPUS (default 0;
# `cpu` with ENGINES=cpu TORCH_DEVICE=cpu PRECISIONS=f32 tries the script on
# a machine without a GPU).
#
# An engine that cannot start (`--engine cuda` without NVIDIA's libraries,
# or failing its start-up check) is recorded with its one-line reason in
# the rows, and the kit goes on.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-bench}
pipeline=${PIPELINE:-target/release/pipeline}
models=${MODELS:-resnet50,vit_b_16,clip_vit_b_32,clip_vit_l_14,dinov2_vitl14}
engines=${ENGINES:-vulkan,cuda}
batches=${BATCHES:-128}
synthetic=${SYNTHETIC:-2048}
repeat=${REPEAT:-3}
precisions=${PRECISIONS:-f16}
torch=${TORCH:-1}
torch_device=${TORCH_DEVICE:-cuda}
gpus=${GPUS:-0}
mkdir -p "$out"

"$pipeline" devices | tee "$out/devices.txt"
if [[ $gpus != cpu ]] && ! awk '$1 ~ /^(gpu:)?0$/ { found = 1 } END { exit !found }' "$out/devices.txt"; then
    echo "gpu-bench.sh: pipeline sees no Vulkan GPU (see pipeline devices above)" >&2
    exit 2
fi
command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/gpu.txt" || true

# `pipeline bench` with `$@`, its report in $1.json and .md, or its
# one-line error in $1.err.
bench() {
    local name=$1
    shift
    rm -f "$out/$name.err"
    if ! "$pipeline" bench "$@" --json "$out/$name.json" --quiet >"$out/$name.md" 2>"$out/$name.log"; then
        grep -v '^$' "$out/$name.log" | tail -1 >"$out/$name.err"
        rm -f "$out/$name.json"
        echo "gpu-bench.sh: $name: $(cat "$out/$name.err")" >&2
        return 1
    fi
}

for model in ${models//,/ }; do
    for engine in ${engines//,/ }; do
        for precision in ${precisions//,/ }; do
            echo "gpu-bench.sh: $model $engine $precision, model only" >&2
            bench "$model-$engine-$precision-model-only" --model-only --engine "$engine" \
                --gpus "$gpus" --model "$model" --precision "$precision" --batches 20 \
                --repeat "$repeat" --sweep "batch=$batches" || continue
            if ((synthetic > 0)); then
                echo "gpu-bench.sh: $model $engine $precision, end to end on $synthetic generated photos" >&2
                bench "$model-$engine-$precision-end-to-end" --synthetic "$synthetic" \
                    --engine "$engine" --gpus "$gpus" --model "$model" --precision "$precision" \
                    --repeat "$repeat" --sweep "batch=$batches" || true
            fi
        done
    done
done

if ((torch)); then
    echo "gpu-bench.sh: PyTorch" >&2
    ways=""
    for precision in ${precisions//,/ }; do
        case $precision in
            f16) ways+="f16,f16-tuned," ;;
            *) ways+="$precision," ;;
        esac
    done
    python3 scripts/bench_pytorch_gpu.py --models "$models" --batches "$batches" \
        --precisions "${ways%,}" --device "$torch_device" --json "$out/pytorch-${models//,/_}.json" |
        tee "$out/pytorch-${models//,/_}.md"
fi

python3 - "$out" <<'EOF' | tee "$out/rows.md"
import glob, json, os, re, sys
out = sys.argv[1]
torch = {}
for path in glob.glob(os.path.join(out, "pytorch-*.json")):
    for row in json.load(open(path)):
        torch[(row["model"], row["batch"], row["precision"])] = row["images_per_s"]
gpu = open(os.path.join(out, "gpu.txt")).read().strip() if os.path.exists(os.path.join(out, "gpu.txt")) else "?"
print(f"GPU (name, driver): {gpu}")
print()
print("| model | engine | precision | batch | mode | pipeline img/s (median, min–max) "
      "| PyTorch eager | ratio | PyTorch tuned | ratio | e2e ÷ model only |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
pattern = re.compile(r"(.+)-(vulkan|cuda|cpu|auto)-(f16|f32|bf16|auto)-(model-only|end-to-end)\.(json|err)$")
reports = {}
for m in filter(None, (pattern.match(os.path.basename(p)) for p in glob.glob(os.path.join(out, "*-*.*")))):
    model, engine, precision, mode, kind = m.groups()
    reports[(model, engine, precision, mode)] = (kind, os.path.join(out, m.group(0)))
def rate(key, batch):
    kind, path = reports.get(key, (None, None))
    if kind != "json":
        return None
    for point in json.load(open(path))["sweep"]:
        if point["batch"] == batch:
            return point
for (model, engine, precision, mode), (kind, path) in sorted(reports.items()):
    if kind == "err":
        why = open(path).read().strip().replace("|", "/")
        print(f"| {model} | {engine} | {precision} | | {mode} | not run: {why} | | | | | |")
        continue
    for point in json.load(open(path))["sweep"]:
        batch, ips, spread = point["batch"], point["images_per_s"], point["spread"]
        cells = [f"{ips:.1f} ({spread['min']:.1f}–{spread['max']:.1f})"]
        for way in ("f16", "f16-tuned") if precision == "f16" else (precision, None):
            base = torch.get((model, batch, way)) if way else None
            cells += [f"{base:.1f}", f"**{ips / base:.2f}**"] if base and mode == "model-only" else ["", ""]
        alone = rate((model, engine, precision, "model-only"), batch)
        cells.append(f"{ips / alone['images_per_s']:.2f}" if alone and mode == "end-to-end" else "")
        print(f"| {model} | {engine} | {precision} | {batch} | {mode} | " + " | ".join(cells) + " |")
EOF
echo "gpu-bench.sh: rows in $out/rows.md" >&2
