#!/usr/bin/env bash
# End to end on the CPU against what a user writes instead (#29 item 5):
# `pipeline infer --gpus cpu --task embed` and `scripts/peer_embed.py`
# (open_clip's or torchvision's preprocessing in a thread pool, torch at
# batch 32, as many threads as cores) on the same folder, interleaved,
# each timed as a whole command (start-up, weights and writing included).
#
#   PYTHON=/path/to/venv/bin/python bash scripts/bench_cpu_e2e.sh ROUNDS \
#       "clip_vit_b_32:WEIGHTS resnet50:WEIGHTS" DIR [DIR ...]
#
# WEIGHTS: an open_clip ViT-B-32-quickgelu state dict for clip_vit_b_32,
# a torchvision state dict for resnet50 (seeded ones do: the speed does
# not depend on the values). Prints a Markdown row per model and folder:
# seconds per round, and the ratio of the medians (peer ÷ pipeline: above
# 1 is pipeline faster). Settings: PIPELINE (default target/release/pipeline),
# THREADS (default: all cores), EXTRA (more `pipeline infer` flags).
set -euo pipefail

rounds=${1:?rounds}
models=${2:?"model:weights ..."}
shift 2
[ $# -ge 1 ] || { echo "usage: $0 ROUNDS 'model:weights ...' DIR [DIR ...]" >&2; exit 2; }
pipeline=${PIPELINE:-target/release/pipeline}
python=${PYTHON:-python3}
threads=${THREADS:-$(nproc)}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=scripts/timing.sh
. "$here/timing.sh"

echo "| model | data | images | peer s (rounds) | pipeline s (rounds) | peer ÷ pipeline |"
echo "|---|---|---|---|---|---|"
for data in "$@"; do
    images=$(find "$data" -maxdepth 1 -type f | wc -l)
    for spec in $models; do
        model=${spec%%:*}
        weights=${spec#*:}
        peer=()
        ours=()
        for _ in $(seq "$rounds"); do
            peer+=("$(seconds "$python" "$here/peer_embed.py" --model "$model" \
                --weights "$weights" --data "$data" --threads "$threads")")
            # shellcheck disable=SC2086
            ours+=("$(seconds "$pipeline" infer --data "$data" --gpus cpu --model "$model" \
                --weights "$weights" --task embed --out "$tmp/out.jsonl" --overwrite ${EXTRA:-})")
        done
        p=$(median "${peer[@]}")
        o=$(median "${ours[@]}")
        printf '| %s | %s | %s | %s | %s | **%.2f** |\n' "$model" "$(basename "$data")" "$images" \
            "$(printf '%.1f ' "${peer[@]}")" "$(printf '%.1f ' "${ours[@]}")" "$(echo "$p / $o" | bc -l)"
    done
done
