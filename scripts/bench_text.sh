#!/usr/bin/env bash
# Text embeddings per second on the CPU against open_clip (#30):
# `pipeline embed-text --gpus cpu` and `scripts/peer_embed_text.py`
# (open_clip's tokenizer and encode_text, batch 64, every core) on the same
# lines, interleaved, each timed as a whole command (start-up, weights and
# writing included).
#
#   PYTHON=/path/to/venv/bin/python bash scripts/bench_text.sh ROUNDS WEIGHTS TEXTS.txt [clip|siglip]
#
# WEIGHTS: an open_clip ViT-B-32-quickgelu state dict; for siglip a Hugging
# Face SiglipModel's model.safetensors with config.json and spiece.model
# beside it (the peer is transformers' SiglipModel). Prints a Markdown
# row: texts, seconds per round, texts per second at the medians, and the
# ratio (peer ÷ pipeline seconds: above 1 is pipeline faster).
set -euo pipefail

rounds=${1:?rounds}
weights=${2:?weights}
texts=${3:?texts}
family=${4:-clip}
case $family in
clip) model=clip_vit_b_32 peer_name=open_clip ;;
siglip) model=siglip_base_patch16_224 peer_name=transformers ;;
*) echo "family: clip or siglip" >&2; exit 2 ;;
esac
pipeline=${PIPELINE:-target/release/pipeline}
python=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=scripts/timing.sh
. "$here/timing.sh"

n=$(wc -l <"$texts")
peer=() ours=()
for _ in $(seq "$rounds"); do
    peer+=("$(seconds "$python" "$here/peer_embed_text.py" "$weights" "$texts" "$tmp/peer.jsonl" all "$family")")
    ours+=("$(seconds "$pipeline" embed-text --model "$model" --weights "$weights" \
        --text "$texts" --out "$tmp/ours.jsonl" --gpus cpu --overwrite)")
done
p=$(median "${peer[@]}")
o=$(median "${ours[@]}")
echo "| texts | $peer_name s (rounds) | pipeline s (rounds) | $peer_name texts/s | pipeline texts/s | $peer_name ÷ pipeline |"
echo "|---|---|---|---|---|---|"
printf '| %s | %s | %s | %.0f | %.0f | %.2f× |\n' "$n" "$(rounded "${peer[@]}")" "$(rounded "${ours[@]}")" \
    "$(echo "$n / $p" | bc -l)" "$(echo "$n / $o" | bc -l)" "$(echo "$p / $o" | bc -l)"
