#!/usr/bin/env bash
# Fetches Pillow's own test images — hundreds of real broken, truncated,
# fuzzer-found and decompression-bomb files — from the Pillow source
# distribution on PyPI, for the loader's corpus test
# (loader/tests/pillow_corpus.rs). Only the formats `pipeline` scans are kept.
#
#   scripts/fetch-pillow-images.sh     # into $PIPELINE_PILLOW_IMAGES, else target/pillow-images
#
# Pillow is under the MIT-CMU licence; the files are test data, not shipped.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${PIPELINE_PILLOW_IMAGES:-target/pillow-images}
version=13.0.0
sha256=cdcd1ba258178f7356d74170c9a81ba4eab6a5d55748bc402a5a2a6fe6be3510
url=https://files.pythonhosted.org/packages/ce/a4/9cc30690a394a8305e8be4c9036aa16d0dfddadd09079860b582f562496d/pillow-$version.tar.gz

if [[ -s $dir/.complete ]]; then
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl --fail --silent --show-error --location --retry 3 -o "$tmp/pillow.tar.gz" "$url"
echo "$sha256  $tmp/pillow.tar.gz" | sha256sum --check --quiet
mkdir -p "$tmp/x" "$dir"
tar -xzf "$tmp/pillow.tar.gz" -C "$tmp/x" "pillow-$version/Tests/images"
find "$tmp/x/pillow-$version/Tests/images" -maxdepth 1 -type f \
    \( -iname '*.jpg' -o -iname '*.jpeg' -o -iname '*.png' -o -iname '*.webp' -o -iname '*.bmp' \
       -o -iname '*.gif' -o -iname '*.tif' -o -iname '*.tiff' \) -exec cp {} "$dir/" \;
echo "pillow $version" > "$dir/.complete"
echo "fetch-pillow-images: $(ls "$dir" | wc -l) files in $dir"
