#!/usr/bin/env bash
# Model only on the CPU: two `pipeline` binaries, PyTorch and onnxruntime,
# interleaved rounds (per round and model: A, B, PyTorch, onnxruntime), 2
# threads, pre-made batches.
#
#   bash scripts/bench_cpu_models.sh A B ROUNDS "MODEL:BATCH ..."
#
# PYTHON (default python3) must have torch, torchvision, transformers,
# efficientnet_lite_pytorch, onnx and onnxruntime (ORT=0 leaves
# onnxruntime out). Prints one line per run: round, model, batch, side,
# images/s.
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1 b=$2 rounds=$3 specs=$4
python=${PYTHON:-python3}
for round in $(seq 1 "$rounds"); do
    for spec in $specs; do
        IFS=: read -r model batch <<<"$spec"
        for side in a b; do
            bin=$a
            [[ $side == b ]] && bin=$b
            json=$(mktemp)
            "$bin" bench --model-only --gpus cpu --model "$model" --batch-size "$batch" \
                --batches "${BATCHES:-3}" --repeat 1 --json "$json" --quiet >/dev/null
            rate=$("$python" -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["sweep"][0]["images_per_s"], 2))' "$json")
            rm -f "$json"
            echo "r$round $model $batch $side $rate"
        done
        runtimes=torch
        [[ ${ORT:-1} == 1 ]] && runtimes="torch onnxruntime"
        for runtime in $runtimes; do
            rate=$("$python" -W ignore scripts/bench_pytorch_models.py --threads 2 --seconds "${SECONDS_TORCH:-6}" \
                --batches "$batch" --models "$model" --runtime "$runtime" | awk -F'|' 'NR == 3 { gsub(/ /, "", $4); print $4 }')
            echo "r$round $model $batch $runtime $rate"
        done
    done
done
