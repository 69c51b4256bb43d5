#!/usr/bin/env bash
# What resolving a cached hub model adds to a run's start (#42): the time
# from `pipeline infer` starting to its worker process starting (execve,
# seen by strace), for a full-size ViT-B/16 classifier named by its repo id
# from the Hugging Face cache (A), against the same network as the built-in
# `vit_b_16` with a weight file (B), in interleaved rounds. Before its
# worker starts, A finds the snapshot, reads config.json and
# preprocessor_config.json and checks the weights' names and shapes; B
# checks its weight file the same way. The cache is filled once by the tool
# itself from the test hub (scripts/hub_server.py), a 344 MB download.
#
#   PYTHON=target/torch-venv/bin/python bash scripts/bench_hub_resolve.sh [ROUNDS]
set -euo pipefail
rounds=${1:-5}
python=${PYTHON:-python3}
bin=target/release/pipeline
tmp=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$tmp"' EXIT

"$python" - "$tmp" <<'PYEOF'
import pathlib, sys
import torch, torchvision, transformers
out = pathlib.Path(sys.argv[1])
repo = out / "hub" / "bench--vit-base-2labels"
repo.mkdir(parents=True)
config = transformers.ViTConfig(id2label={0: "normal", 1: "nsfw"}, label2id={"normal": 0, "nsfw": 1})
transformers.ViTForImageClassification(config).save_pretrained(repo)
transformers.ViTImageProcessorPil(size={"height": 224, "width": 224}).save_pretrained(repo)
torch.save(torchvision.models.vit_b_16().state_dict(), out / "vit_b_16.pth")
PYEOF
mkdir -p "$tmp/data"
cp samples/cat_chelsea.jpg "$tmp/data/"
"$python" scripts/hub_server.py "$tmp/hub" "$tmp/hub.log" >"$tmp/port" &
server=$!
sleep 1
export HF_HUB_CACHE=$tmp/cache NO_PROXY=127.0.0.1 HF_ENDPOINT=http://127.0.0.1:$(head -1 "$tmp/port")
"$bin" infer --data "$tmp/data" --model bench/vit-base-2labels --gpus cpu --quiet \
    --out "$tmp/warm.jsonl" >/dev/null
export HF_HUB_OFFLINE=1

# Seconds from the first execve (pipeline) to the second (its worker).
to_worker() {
    strace -f -ttt -e trace=execve -o "$tmp/trace" "$@" >/dev/null 2>&1
    grep -E 'execve\(.*(pipeline|/proc/self/exe)' "$tmp/trace" | awk '{print $2}' | head -2 |
        paste -sd' ' - | awk '{printf "%.3f\n", $2 - $1}'
}

a=() b=() c=()
for i in $(seq "$rounds"); do
    a+=("$(to_worker "$bin" infer --data "$tmp/data" --model bench/vit-base-2labels --gpus cpu \
        --quiet --overwrite --out "$tmp/a.jsonl")")
    b+=("$(to_worker "$bin" infer --data "$tmp/data" --model vit_b_16 --weights "$tmp/vit_b_16.pth" \
        --gpus cpu --quiet --overwrite --out "$tmp/b.jsonl")")
    c+=("$(to_worker "$bin" infer --data "$tmp/data" --model vit_b_16 --gpus cpu --quiet \
        --overwrite --out "$tmp/c.jsonl")")
done
source scripts/timing.sh
echo "hub id, cached (s to the worker's start):   ${a[*]}  median $(median "${a[@]}")"
echo "vit_b_16 --weights (s to the worker's start): ${b[*]}  median $(median "${b[@]}")"
echo "vit_b_16, seeded (s to the worker's start):   ${c[*]}  median $(median "${c[@]}")"
