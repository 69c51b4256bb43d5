#!/usr/bin/env bash
# Fetches Pillow's own test images — hundreds of real broken, truncated,
# fuzzer-found and decompression-bomb files — from the Pillow source
# distribution (fetched by pip, through its configured index), for the loader's corpus test
# (loader/tests/it/pillow_corpus.rs). Only the formats `pipeline` scans are kept.
#
#   scripts/fetch-pillow-images.sh     # into $PIPELINE_PILLOW_IMAGES, else target/pillow-images
#
# Pillow is under the MIT-CMU licence; the files are test data, not shipped.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${PIPELINE_PILLOW_IMAGES:-target/pillow-images}
version=13.0.0
sha256=cdcd1ba258178f7356d74170c9a81ba4eab6a5d55748bc402a5a2a6fe6be3510

if [[ -s $dir/.complete ]]; then
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The sdist itself (--no-binary pillow; its build tools may come as wheels),
# without installing anything.
python3 -m pip download --quiet --no-deps --no-binary pillow --dest "$tmp" "pillow==$version"
mv "$tmp/pillow-$version.tar.gz" "$tmp/pillow.tar.gz"
echo "$sha256  $tmp/pillow.tar.gz" | sha256sum --check --quiet
mkdir -p "$tmp/x" "$dir"
tar -xzf "$tmp/pillow.tar.gz" -C "$tmp/x" "pillow-$version/Tests/images"
find "$tmp/x/pillow-$version/Tests/images" -maxdepth 1 -type f \
    \( -iname '*.jpg' -o -iname '*.jpeg' -o -iname '*.png' -o -iname '*.webp' -o -iname '*.bmp' \
       -o -iname '*.gif' -o -iname '*.tif' -o -iname '*.tiff' \) -exec cp {} "$dir/" \;
echo "pillow $version" > "$dir/.complete"
echo "fetch-pillow-images: $(ls "$dir" | wc -l) files in $dir"
