#!/usr/bin/env bash
# ONNX models on the CPU against onnxruntime's Python API (#41), interleaved
# rounds, the ratio of the medians:
#   - model only: `pipeline bench --model-only` ÷ `peer_onnx.py --model-only`
#     (pre-made batches of 32, every core, warm-up excluded);
#   - end to end: `peer_onnx.py --data` (Pillow in a thread pool, batches of
#     32) ÷ `pipeline infer` on the same folder, each timed as a whole
#     command (start-up and writing included); above 1 is pipeline faster.
#     The CPU seconds (user + system) of each side's median round are shown
#     too: where both sides keep every core busy, their wall times can
#     differ only as much as the work they do.
#
#   PYTHON=target/torch-venv/bin/python bash scripts/bench_onnx.sh ROUNDS DIR MODEL.onnx [MODEL.onnx ...]
#
# The models take 224×224 NCHW f32 with a dynamic batch (torchvision's
# exported with `torch.onnx.export`, as `make-models` below does); both
# sides preprocess as torchvision's eval transform (shorter side 256
# bilinear, 224 crop, ImageNet statistics). PYTHON needs onnxruntime,
# numpy and Pillow (and torch, torchvision for `make-models`).
#
#   PYTHON=… bash scripts/bench_onnx.sh make-models DIR   # resnet50, resnet18, mobilenet_v3_small
set -euo pipefail
python=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)

if [[ ${1:-} == make-models ]]; then
    out=${2:?folder}
    mkdir -p "$out"
    "$python" - "$out" <<'PY'
import sys, torch, torchvision
torch.manual_seed(0)
for name in ["resnet50", "resnet18", "mobilenet_v3_small"]:
    model = getattr(torchvision.models, name)().eval()
    torch.onnx.export(model, (torch.zeros(2, 3, 224, 224),), f"{sys.argv[1]}/{name}.onnx",
                      dynamo=False, input_names=["pixel_values"], output_names=["logits"],
                      dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17)
PY
    exit 0
fi

rounds=${1:?rounds}
data=${2:?folder of images}
shift 2
[ $# -ge 1 ] || { echo "usage: $0 ROUNDS DIR MODEL.onnx [...]" >&2; exit 2; }
pipeline=${PIPELINE:-target/release/pipeline}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=scripts/timing.sh
. "$here/timing.sh"
pre=(--resize 256 --crop 224)
images=$(find "$data" -maxdepth 1 -type f | wc -l)

echo "| model | pipeline model only, images/s | onnxruntime Python | ratio | pipeline e2e s | Python e2e s | Python ÷ pipeline | CPU s, pipeline / Python |"
echo "|---|---|---|---|---|---|---|---|"
# The CPU seconds of the round whose wall time is the median.
cpu_of_median() { # WALLS... -- CPUS...
    local -a walls=() cpus=()
    while [ "$1" != -- ]; do walls+=("$1"); shift; done
    shift
    cpus=("$@")
    local m i
    m=$(median "${walls[@]}")
    for i in "${!walls[@]}"; do
        if [ "$(echo "${walls[$i]} == $m" | bc)" = 1 ]; then printf '%.1f' "${cpus[$i]}"; return; fi
    done
    echo "-"
}
for model in "$@"; do
    ours=() peer=() ours_e2e=() peer_e2e=() ours_cpu=() peer_cpu=()
    for _ in $(seq "$rounds"); do
        "$pipeline" bench --model-only --gpus cpu --model "$model" --batch-size 32 --batches 32 \
            --json "$tmp/bench.json" >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
        ours+=("$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["images_per_s"])' "$tmp/bench.json")")
        peer+=("$("$python" "$here/peer_onnx.py" --onnx "$model" --model-only --batch 32 --seconds 12)")
        ours_e2e+=("$(seconds "$pipeline" infer --quiet --gpus cpu --data "$data" --model "$model" \
            "${pre[@]}" --task embed --out "$tmp/out.npy" --format npy --overwrite)")
        ours_cpu+=("$(cpu_seconds)")
        peer_e2e+=("$(seconds "$python" "$here/peer_onnx.py" --onnx "$model" --data "$data")")
        peer_cpu+=("$(cpu_seconds)")
    done
    o=$(median "${ours[@]}") p=$(median "${peer[@]}")
    oe=$(median "${ours_e2e[@]}") pe=$(median "${peer_e2e[@]}")
    printf '| %s (%s images) | %s | %s | **%.2f** | %s | %s | **%.2f** | %s / %s |\n' \
        "$(basename "$model" .onnx)" "$images" "$(rounded "${ours[@]}")" "$(rounded "${peer[@]}")" \
        "$(echo "$o / $p" | bc -l)" "$(rounded "${ours_e2e[@]}")" "$(rounded "${peer_e2e[@]}")" \
        "$(echo "$pe / $oe" | bc -l)" \
        "$(cpu_of_median "${ours_e2e[@]}" -- "${ours_cpu[@]}")" "$(cpu_of_median "${peer_e2e[@]}" -- "${peer_cpu[@]}")"
done
