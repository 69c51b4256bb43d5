#!/usr/bin/env bash
# Fetches NVIDIA's NVRTC (the PyPI wheel `nvidia-cuda-nvrtc`, by pip through
# its configured index) for the CUDA engine's kernel compile test
# (gpu-worker/cuda/tests/kernels.rs): NVRTC compiles CUDA C++ to PTX with
# no GPU, so CI checks every kernel. Only the wheel's lib/ is kept.
#
#   scripts/fetch-nvrtc.sh     # into $PIPELINE_NVRTC_DIR, else target/nvrtc
#
# Prints the folder that holds libnvrtc.so.13, for PIPELINE_CUDA_LIB_PATH.
# NVRTC is under NVIDIA's CUDA Toolkit EULA; it is test tooling here, not
# shipped.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${PIPELINE_NVRTC_DIR:-target/nvrtc}
version=13.2.86
sha256=8111c5130e967b78222ea2124145f8efe9ce201b752b2579a2513100a53be1c5
lib=$dir/nvidia/cu13/lib

if [[ ! -s $dir/.complete ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --quiet --no-deps --only-binary :all: --dest "$tmp" \
        "nvidia-cuda-nvrtc==$version"
    wheel=$(echo "$tmp"/nvidia_cuda_nvrtc-"$version"-*.whl)
    echo "$sha256  $wheel" | sha256sum --check --quiet
    mkdir -p "$dir"
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], [n for n in zipfile.ZipFile(sys.argv[1]).namelist() if "/lib/" in n])' "$wheel" "$dir"
    echo "$version" >"$dir/.complete"
fi
realpath "$lib"
