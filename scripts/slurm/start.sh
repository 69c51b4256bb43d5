#!/usr/bin/env bash
# Starts a single-node Slurm cluster on this machine for the tests: munged,
# slurmctld and slurmd, with config, state, logs and pid files under one run
# folder. Installs the Debian packages when missing (needs root). Prints the
# SLURM_CONF line clients need. Stop it with scripts/slurm/stop.sh RUN_DIR.
#
#   scripts/slurm/start.sh target/slurm
#
# The node advertises 8 CPUs (more tasks than cores) and two fake GPUs
# (`gres` on symlinks to /dev/null), so `srun --gpus-per-task=1` sets
# CUDA_VISIBLE_DEVICES as on a GPU node. Facts: ../shared/SLURM.md.
set -euo pipefail
run=$(realpath -m "${1:?usage: start.sh RUN_DIR}")
if [[ $(id -u) -ne 0 ]]; then
    echo "slurm/start.sh: needs root (daemons, packages)" >&2
    exit 2
fi
packages=(slurmctld slurmd slurm-client munge)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "slurm/start.sh: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

node=$(hostname -s)
mkdir -p "$run"/{state,spool,log,dev}
ln -sf /dev/null "$run/dev/nvidia0"
ln -sf /dev/null "$run/dev/nvidia1"
cat > "$run/slurm.conf" <<CONF
ClusterName=pipeline-test
SlurmctldHost=localhost
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
StateSaveLocation=$run/state
SlurmdSpoolDir=$run/spool
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd.pid
SlurmctldLogFile=$run/log/slurmctld.log
SlurmdLogFile=$run/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
KillWait=5
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName=$node NodeAddr=127.0.0.1 CPUs=8 RealMemory=4000 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
cat > "$run/gres.conf" <<CONF
AutoDetect=off
NodeName=$node Name=gpu File=$run/dev/nvidia[0-1]
CONF

# munged: reuse a running one, else start it as the munge user.
if ! pgrep -u munge -x munged >/dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged
fi
export SLURM_CONF=$run/slurm.conf
alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
alive "$run/slurmctld.pid" || slurmctld -f "$SLURM_CONF"
for _ in $(seq 50); do scontrol ping >/dev/null 2>&1 && break; sleep 0.2; done
alive "$run/slurmd.pid" || slurmd -f "$SLURM_CONF" -N "$node"
state=
for _ in $(seq 150); do
    state=$(sinfo -h -n "$node" -o %t 2>/dev/null || true)
    case $state in
        idle*|mix*|alloc*) break ;;
        drain*|down*) scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 0.2
done
case $state in
    idle*|mix*|alloc*) ;;
    *) echo "slurm/start.sh: node $node is '$state'; see $run/log" >&2; exit 1 ;;
esac
echo "SLURM_CONF=$SLURM_CONF"
