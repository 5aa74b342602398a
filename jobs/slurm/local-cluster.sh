#!/usr/bin/env bash
# A single-node Slurm on this machine (root), for trying the sbatch scripts
# and for CI: munge, slurmctld and slurmd with their state in one scratch
# folder, the node declared with GEOTRAIN_SLURM_CPUS CPUs (default 8, more
# than the cores: tasks share them).
#
#   bash jobs/slurm/local-cluster.sh start [DIR]   # prints: export SLURM_CONF=DIR/slurm.conf
#   bash jobs/slurm/local-cluster.sh stop [DIR]    # stops the daemons by their PID files
#
# Needs slurm-wlm and munge (jobs/install-deps.sh installs them).
set -euo pipefail
action=${1:?usage: local-cluster.sh start|stop [DIR]}
dir=$(realpath -m "${2:-${TMPDIR:-/tmp}/geotrain-slurm}")
cpus=${GEOTRAIN_SLURM_CPUS:-8}
host=$(hostname -s)

stop() {
  for daemon in slurmd slurmctld munged; do
    pidfile="$dir/$daemon.pid"
    [[ -f $pidfile ]] || continue
    pid=$(cat "$pidfile")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
  [[ -f $dir/munge-dir ]] && rm -rf "$(cat "$dir/munge-dir")" "$dir/munge-dir"
  return 0
}

if [[ $action == stop ]]; then
  stop
  exit 0
fi
[[ $action == start ]] || { echo "local-cluster.sh: unknown action '$action' (start or stop)" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "local-cluster.sh: run as root (the daemons switch users)" >&2; exit 2; }
for tool in munged slurmctld slurmd sinfo; do
  command -v "$tool" >/dev/null || { echo "local-cluster.sh: $tool not found: bash jobs/install-deps.sh" >&2; exit 2; }
done
stop  # a previous cluster in the same folder
mkdir -p "$dir/state" "$dir/spool" "$dir/log"

# munge: its own key and socket, in a folder of its own directly under the
# temporary folder: munged runs as the munge user, which may not be able to
# enter the scratch folder (e.g. one made by mktemp -d, mode 700).
munge_dir=$(mktemp -d "${TMPDIR:-/tmp}/geotrain-munge.XXXXXX")
echo "$munge_dir" > "$dir/munge-dir"
chown munge:munge "$munge_dir"
key="$munge_dir/munge.key"
dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
chown munge:munge "$key"
chmod 400 "$key"
socket="$munge_dir/munge.socket"
runuser -u munge -- munged --key-file="$key" --socket="$socket" --pid-file="$munge_dir/munged.pid" \
  --log-file="$munge_dir/munged.log" --seed-file="$munge_dir/munge.seed" --force
cp "$munge_dir/munged.pid" "$dir/munged.pid"
for _ in $(seq 50); do munge -S "$socket" -n </dev/null | unmunge -S "$socket" >/dev/null 2>&1 && break; sleep 0.1; done
munge -S "$socket" -n </dev/null | unmunge -S "$socket" >/dev/null || { echo "local-cluster.sh: munge does not answer" >&2; exit 1; }

# cred_expire: a requeued job waits this long before it starts again
# (default 120 s; a pre-empted job resumes sooner on this one node).
cat > "$dir/slurm.conf" <<CONF
ClusterName=geotrain-local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket,cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -i
slurmd
for _ in $(seq 100); do
  sinfo -h -o %t 2>/dev/null | grep -qE '^idle' && break
  sleep 0.2
done
sinfo -h -o %t | grep -qE '^idle' || { echo "local-cluster.sh: the node did not become idle in 20 s; see $dir/log" >&2; stop; exit 1; }
echo "export SLURM_CONF=$dir/slurm.conf"
