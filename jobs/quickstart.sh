#!/usr/bin/env bash
# The main job on its embedded default: geotrain train as an MPI job of 4
# ranks (oversubscribed on a laptop): probe the network, plan on rank 0 and
# print the plan, train the tiny GPT on the shipped corpus as 2 pipeline
# stages x 2 data-parallel replicas (inputs/quickstart.toml), a progress line
# per step, the validation loss at the end. Installs and builds what is
# missing first. Extra arguments are config overrides, e.g.
#   bash jobs/quickstart.sh --train.steps=50 --pipeline.placement=random
# GEOTRAIN_RANKS=8 bash jobs/quickstart.sh runs 8 ranks (4 replicas).
set -euo pipefail
cd "$(dirname "$0")/.."
bash jobs/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target geotrain
ranks="${GEOTRAIN_RANKS:-4}"
if [ "$(id -u)" = 0 ]; then  # Open MPI refuses root unless told twice
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# --oversubscribe: more ranks than cores is fine here (waiting ranks yield).
log=$(mktemp)
trap 'rm -f "$log"' EXIT
mpirun -n "$ranks" --oversubscribe --mca mpi_yield_when_idle 1 \
  build/release/geotrain train inputs/quickstart.toml "$@" | tee "$log"
# Where the time went, from the run's timing file (h5py: Debian's python3).
timing=$(sed -n 's/^timing: //p' "$log" | tail -1)
for python in python3 /usr/bin/python3; do
  if [ -n "$timing" ] && "$python" -c 'import h5py, numpy' 2>/dev/null; then
    echo
    exec "$python" analysis/timing_report.py "$timing"
  fi
done
