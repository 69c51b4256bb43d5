#!/usr/bin/env bash
# Remote reads against local disk, end to end (`pipeline bench`), in
# interleaved rounds: the same JPEGs read from a local list file and from
# fault-server on 127.0.0.1 with LATENCY_MS of injected latency per request.
#
#   scripts/bench_remote.sh [ROUNDS] [LATENCY_MS] [IMAGES]
#
# Prints each round's images/s and the remote/local ratio. Needs
# `cargo build --release --workspace` first.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
latency=${2:-20}
images=${3:-400}
flags=(--model tiny --gpus cpu --repeat 1 --quiet ${BENCH_FLAGS:-})
dir=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$dir"' EXIT
server=
target/release/make-photos "$dir/photos" "$images" 500x375 >/dev/null
(cd "$dir/photos" && ls *.jpg > list.txt)
# The server exits when its stdin (a FIFO this script holds open) closes.
mkfifo "$dir/hold"
target/release/fault-server "$dir/photos" 0 <"$dir/hold" >"$dir/port" &
server=$!
exec 3>"$dir/hold"
for _ in $(seq 50); do grep -q PORT= "$dir/port" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/PORT=//p' "$dir/port")
rate() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["images_per_s"])' "$1"; }
echo "round local_img_s remote_img_s ratio  (${latency} ms per request, ${images} images)"
for r in $(seq "$rounds"); do
    target/release/pipeline bench --data "$dir/photos/list.txt" "${flags[@]}" --json "$dir/local.json" >/dev/null
    target/release/pipeline bench --data "http://127.0.0.1:$port/latency/$latency/list.txt" "${flags[@]}" --json "$dir/remote.json" >/dev/null
    local=$(rate "$dir/local.json"); remote=$(rate "$dir/remote.json")
    python3 -c "import sys; l,r=map(float,sys.argv[1:]); print(f'$r {l:.1f} {r:.1f} {r/l:.3f}')" "$local" "$remote"
done
