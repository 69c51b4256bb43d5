#!/usr/bin/env bash
# Starts a real S3-compatible server on 127.0.0.1 for the tests: moto's
# server (PyPI `moto[server]`), installed into a virtual environment under
# target/ when missing. Prints `PORT=N` and `PID=N` once it answers. Stop
# it with `kill PID`.
#
#   scripts/s3/start.sh target/s3
set -euo pipefail
run=$(realpath -m "${1:?usage: start.sh RUN_DIR}")
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=${PIPELINE_MOTO_VENV:-$repo/target/moto-venv}
# Tests start servers in parallel: one installs, the others wait for it
# (two at once failed a cold CI run: `python3 -m venv`, File exists). The
# lock is released before the server starts, so it does not inherit it.
mkdir -p "$(dirname "$venv")"
(
    flock 9
    if [[ ! -x $venv/bin/moto_server ]]; then
        echo "s3/start.sh: installing moto into $venv" >&2
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet "moto[server]==5.*" "boto3" >&2
    fi
) 9>"$venv.lock"
mkdir -p "$run"
port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$run/moto.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
    if "$venv/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/moto-api/')" 2>/dev/null; then
        echo "PORT=$port"
        echo "PID=$pid"
        echo "PYTHON=$venv/bin/python"
        exit 0
    fi
    sleep 0.2
done
echo "s3/start.sh: moto did not answer; its log:" >&2
cat "$run/moto.log" >&2
kill "$pid" 2>/dev/null || true
exit 1
