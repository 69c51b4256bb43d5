#!/usr/bin/env bash
# Stops the cluster scripts/slurm/start.sh started in RUN_DIR, by pid:
# SIGTERM, wait, SIGKILL only if still alive. munged is left running (other
# users of the machine may need it).
set -uo pipefail
run=$(realpath -m "${1:?usage: stop.sh RUN_DIR}")
for daemon in slurmd slurmctld; do
    pidfile=$run/$daemon.pid
    [[ -s $pidfile ]] || continue
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    rm -f "$pidfile"
done
exit 0
