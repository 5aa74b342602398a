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
exec mpirun -n "$ranks" --oversubscribe --mca mpi_yield_when_idle 1 \
  build/release/geotrain train inputs/quickstart.toml "$@"
