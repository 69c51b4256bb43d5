#!/usr/bin/env bash
# What resolving a cached hub model adds to a run's start (#42): the time
# from `pipeline infer` starting to its worker process starting (execve,
# seen by strace), for a full-size ViT-B/16 classifier named by its repo id
# from the Hugging Face cache (A), against the same network as the built-in
# `vit_b_16` with a weight file (B) and seeded (C); and for a full-size
# ResNet-50 classifier (transformers' ResNetConfig defaults, as
# microsoft/resnet-50) by its repo id (D) against the built-in `resnet50`
# with torchvision's weight file (E), in interleaved rounds. Before its
# worker starts, A finds the snapshot, reads config.json and
# preprocessor_config.json and checks the weights' names and shapes; B
# checks its weight file the same way; D loads its ResNet on the host (a
# burn module: that is its check); E does not look at its file. The cache
# is filled once by the tool itself from the test hub
# (scripts/hub_server.py), a 344 + 94 MB download.
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
repo = out / "hub" / "bench--resnet-50"
repo.mkdir(parents=True)
transformers.ResNetForImageClassification(transformers.ResNetConfig()).save_pretrained(repo)
transformers.ConvNextImageProcessorPil(size={"shortest_edge": 224}, crop_pct=0.875, resample=3).save_pretrained(repo)
torch.save(torchvision.models.resnet50().state_dict(), out / "resnet50.pth")
PYEOF
mkdir -p "$tmp/data"
cp samples/cat_chelsea.jpg "$tmp/data/"
"$python" scripts/hub_server.py "$tmp/hub" "$tmp/hub.log" >"$tmp/port" &
server=$!
# The server prints its port once it listens.
for _ in $(seq 100); do
    [[ -s "$tmp/port" ]] && break
    sleep 0.3
done
export HF_HUB_CACHE=$tmp/cache NO_PROXY=127.0.0.1 HF_ENDPOINT=http://127.0.0.1:$(head -1 "$tmp/port")
for repo in bench/vit-base-2labels bench/resnet-50; do
    "$bin" infer --data "$tmp/data" --model "$repo" --gpus cpu --quiet \
        --overwrite --out "$tmp/warm.jsonl" >/dev/null
done
export HF_HUB_OFFLINE=1

# Seconds from the first execve (pipeline) to the second (its worker).
to_worker() {
    strace -f -ttt -e trace=execve -o "$tmp/trace" "$@" >/dev/null 2>&1
    grep -E 'execve\(.*(pipeline|/proc/self/exe)' "$tmp/trace" | awk '{print $2}' | head -2 |
        paste -sd' ' - | awk '{printf "%.3f\n", $2 - $1}'
}

a=() b=() c=() d=() e=()
for i in $(seq "$rounds"); do
    a+=("$(to_worker "$bin" infer --data "$tmp/data" --model bench/vit-base-2labels --gpus cpu \
        --quiet --overwrite --out "$tmp/a.jsonl")")
    b+=("$(to_worker "$bin" infer --data "$tmp/data" --model vit_b_16 --weights "$tmp/vit_b_16.pth" \
        --gpus cpu --quiet --overwrite --out "$tmp/b.jsonl")")
    c+=("$(to_worker "$bin" infer --data "$tmp/data" --model vit_b_16 --gpus cpu --quiet \
        --overwrite --out "$tmp/c.jsonl")")
    d+=("$(to_worker "$bin" infer --data "$tmp/data" --model bench/resnet-50 --gpus cpu \
        --quiet --overwrite --out "$tmp/d.jsonl")")
    e+=("$(to_worker "$bin" infer --data "$tmp/data" --model resnet50 --weights "$tmp/resnet50.pth" \
        --gpus cpu --quiet --overwrite --out "$tmp/e.jsonl")")
done
source scripts/timing.sh
echo "hub id, cached (s to the worker's start):   ${a[*]}  median $(median "${a[@]}")"
echo "vit_b_16 --weights (s to the worker's start): ${b[*]}  median $(median "${b[@]}")"
echo "vit_b_16, seeded (s to the worker's start):   ${c[*]}  median $(median "${c[@]}")"
echo "ResNet-50 hub id, cached (s):                ${d[*]}  median $(median "${d[@]}")"
echo "resnet50 --weights (s):                      ${e[*]}  median $(median "${e[@]}")"
