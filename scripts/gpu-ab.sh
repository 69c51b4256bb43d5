#!/usr/bin/env bash
# A/B of two `pipeline` binaries on GPU 0, alternating within each round
# (round 0 is the autotune warm-up; drop it):
#
#   bash scripts/gpu-ab.sh BEFORE AFTER ROUNDS "MODEL:PRECISION:MODE ..." [OUT]
#
# MODE is `mo` (bench --model-only, 20 timed batches) or `e2e` (bench
# --synthetic 2048). Batch 128. Prints one line per run: round, model,
# precision, mode, binary (a or b), images/s, device busy fraction, batch
# latency, stage seconds; the JSON reports go to OUT (default ab-out).
set -uo pipefail
before=$1 after=$2 rounds=$3 specs=$4 out=${5:-ab-out}
mkdir -p "$out"
for round in $(seq 0 "$rounds"); do
    for spec in $specs; do
        IFS=: read -r model precision mode <<<"$spec"
        if [[ $mode == mo ]]; then args=(--model-only --batches 20); else args=(--synthetic 2048); fi
        for side in a b; do
            bin=$before
            [[ $side == b ]] && bin=$after
            json="$out/$model-$precision-$mode-$side-$round.json"
            "$bin" bench "${args[@]}" --gpus "${GPUS:-0}" --model "$model" --precision "$precision" \
                --batch-size "${BATCH:-128}" --repeat 1 --json "$json" --quiet >/dev/null 2>"$out/err-$side.txt" ||
                { tail -3 "$out/err-$side.txt"; continue; }
            python3 - "$json" "r$round $model $precision $mode $side" <<'PY'
import json, sys
point = json.load(open(sys.argv[1]))["sweep"][0]
stages = {s["stage"]: round(s["busy_s"], 3) for s in point["stages"]}
print(sys.argv[2], round(point["images_per_s"], 1), point.get("device_busy_fraction"),
      point["batch_latency_ms"], stages)
PY
        done
    done
done
