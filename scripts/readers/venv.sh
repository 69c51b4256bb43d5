#!/usr/bin/env bash
# The readers users load `pipeline`'s outputs with (numpy, pyarrow, DuckDB,
# embedding-reader, which autofaiss reads npy folders through),
# installed into a virtual environment under target/ when missing, for the
# output tests. Prints `PYTHON=path`.
#
#   scripts/readers/venv.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=${PIPELINE_READERS_VENV:-$repo/target/readers-venv}
# Tests run in parallel: one installs, the others wait for it.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if ! "$venv/bin/python" -c 'import numpy, pyarrow, duckdb, embedding_reader' 2>/dev/null; then
    echo "readers/venv.sh: installing numpy, pyarrow, duckdb and embedding-reader into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet numpy pyarrow duckdb embedding-reader >&2
fi
echo "PYTHON=$venv/bin/python"
