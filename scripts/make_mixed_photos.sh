#!/usr/bin/env bash
# A folder of photo-like JPEGs at the sizes cameras and phones write, the
# "mixed" set of BENCHMARKS.md: 80 × 640×480, 50 × 1600×1200,
# 20 × 3000×2000, 8 × 4000×3000, 2 × 5472×3648 (160 images, 0.3–20 MP),
# shuffled by name so that no run sees the sizes in blocks; TIMES copies
# of that mix (other pictures each time: 480 images for TIMES=3).
#
#   bash scripts/make_mixed_photos.sh DIR [TIMES]
#
# Needs target/release/make-photos (cargo build --release -p fixtures).
set -euo pipefail
out=${1:?folder}
times=${2:-1}
make_photos=${MAKE_PHOTOS:-target/release/make-photos}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
for spec in 80:640x480 50:1600x1200 20:3000x2000 8:4000x3000 2:5472x3648; do
    count=$((${spec%%:*} * times))
    "$make_photos" "$tmp/${spec#*:}" "$count" "${spec#*:}" >/dev/null
done
# A fixed shuffle (the same names on every machine): each file's new name
# is the hash of its old path.
find "$tmp" -type f -name '*.jpg' | sort | while read -r f; do
    name=$(printf '%s' "${f#"$tmp"/}" | sha256sum | cut -c1-16)
    mv "$f" "$out/$name.jpg"
done
echo "$out: $(find "$out" -maxdepth 1 -name '*.jpg' | wc -l) JPEGs, 0.3–20 MP"
