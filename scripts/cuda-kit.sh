#!/usr/bin/env bash
# The CUDA engine's GPU kit (#28): what a session with a GPU machine
# carries there to verify the engine, built here (the GPU machine has no
# network and no Rust toolchain).
#
#   bash scripts/cuda-kit.sh build    # here: target/cuda-kit/ (about 50 MB)
#
# then, on the GPU machine, one device call each (carry target/cuda-kit,
# and target/weights for EfficientNet-Lite0's real weights):
#
#   bash scripts/cuda-kit.sh test     # every family on the GPU against its
#                                     # f32 reference (tests/cuda_gpu.rs)
#   bash scripts/cuda-kit.sh unpack && . target/cuda-kit/env.sh &&
#       MODELS=resnet50 bash scripts/gpu-bench.sh OUT
#
# or both in one call (not yet timed: give it a whole 10-minute device
# call): `bash scripts/cuda-kit.sh verify OUT` (MODELS as
# gpu-bench.sh takes it, default resnet50; the tests' output goes to
# OUT/cuda_gpu.txt, and a failing test does not stop the benchmark).
#
# `test` and `unpack` find NVIDIA's libraries in the Python environment's
# pip wheels (nvidia/*/lib) unless PIPELINE_CUDA_LIB_PATH is set.
set -euo pipefail
cd "$(dirname "$0")/.."
kit=target/cuda-kit

nvidia_libs() {
    if [ -z "${PIPELINE_CUDA_LIB_PATH:-}" ]; then
        PIPELINE_CUDA_LIB_PATH=$(python3 -c "import glob, os
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
dirs = sorted({os.path.dirname(p) for root in nvidia.__path__
               for p in glob.glob(os.path.join(root, '*', 'lib', 'lib*.so*'))})
print(':'.join(dirs))")
        export PIPELINE_CUDA_LIB_PATH
    fi
    echo "NVIDIA libraries from: ${PIPELINE_CUDA_LIB_PATH:-the system search path}"
    echo "export PIPELINE_CUDA_LIB_PATH='${PIPELINE_CUDA_LIB_PATH:-}'" >"$kit/env.sh"
}

unpack() {
    python3 -c "import lzma, shutil, sys
with lzma.open(sys.argv[1]) as src, open(sys.argv[2], 'wb') as dst:
    shutil.copyfileobj(src, dst)" "$1" "$2"
    chmod +x "$2"
}

# The path of tests/cuda_gpu.rs's binary, built.
test_binary() {
    cargo test --release -p gpu-worker --test cuda_gpu --no-run --message-format=json \
        2>/dev/null | python3 -c "import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get('reason') == 'compiler-artifact' and m['target']['name'] == 'cuda_gpu':
        if m.get('executable'):
            print(m['executable'])"
}

case "${1:-}" in
build)
    mkdir -p "$kit"
    cargo build --release -p cli
    test_bin=$(test_binary)
    for pair in "target/release/pipeline:pipeline" "$test_bin:cuda_gpu"; do
        src=${pair%%:*}
        name=${pair##*:}
        strip -o "$kit/$name" "$src"
        xz -9 -T0 -f "$kit/$name"
    done
    ls -la "$kit"
    ;;
test)
    nvidia_libs
    unpack "$kit/cuda_gpu.xz" "$kit/cuda_gpu"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
    PIPELINE_REQUIRE_GPU=1 PIPELINE_WEIGHTS_DIR=${PIPELINE_WEIGHTS_DIR:-$PWD/target/weights} \
        "$kit/cuda_gpu" --test-threads=1 --nocapture
    ;;
unpack)
    nvidia_libs
    mkdir -p target/release
    unpack "$kit/pipeline.xz" target/release/pipeline
    target/release/pipeline devices
    ;;
verify)
    out=${2:?usage: scripts/cuda-kit.sh verify OUT}
    mkdir -p "$out"
    status=0
    bash "$0" test 2>&1 | tee "$out/cuda_gpu.txt" || status=$?
    bash "$0" unpack
    . "$kit/env.sh"
    MODELS=${MODELS:-resnet50} bash scripts/gpu-bench.sh "$out"
    exit "$status"
    ;;
*)
    echo "usage: scripts/cuda-kit.sh build|test|unpack|verify OUT" >&2
    exit 2
    ;;
esac
