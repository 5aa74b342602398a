#!/usr/bin/env bash
# The paper's claim on an emulated network: on each scaled scenario, train
# the same steps with the planned placement, rank order and a random one,
# each in its own emulation (jobs/emulate/emulate.py), writing a timing file
# per run; then analysis/emulation_report.py writes the report
# (analysis/results/emulation.md) and its plots. Root; ~15 minutes on 2 cores.
#
#   bash jobs/emulate/experiment.sh [STEPS]
#
# Scaled scenarios: 8 ranks (the paper: 64), at 4 sites (world-wide: 4 of its
# 8 cities; regional: its 4 sites; multi-dc: its 2 sites with 4 ranks each),
# ranks interleaved over the sites as mpirun maps by node;
# inputs/models/emulation.toml (8 layers, hidden 256: ~6.5 MB of gradient
# per stage) as 4 stages x 2 replicas, 4 micro-batches of 2 sequences, GPipe. The
# model's messages are ~100x smaller than GPT-3 XL's, so bandwidth is scaled
# down (world-wide and regional x0.05, multi-dc x0.1) until a stage's
# gradient exchange between two sites takes about 10-70x the link's
# latency, as the paper's does (its per-pair term 2a + 1.3/b: about 8-45x);
# unscaled, this model's exchanges would be latency-bound, which the
# paper's are not.
set -euo pipefail
cd "$(dirname "$0")/../.."
source jobs/emulate/run_emulated.sh
start_experiment runs/emulate 6 "$@"
scenarios=(
  "world-wide|$world_wide_file|$world_wide_sites"
  "regional|inputs/scenarios/regional.toml|--devices 2,2,2,2 --bandwidth-scale 0.05"
  "multi-dc|inputs/scenarios/multi-dc.toml|--devices 4,4 --bandwidth-scale 0.1"
)
for entry in "${scenarios[@]}"; do
  IFS='|' read -r name file options <<<"$entry"
  # GEOTRAIN_SCENARIOS="regional multi-dc" runs some only (the report reads whatever is there).
  [[ -z ${GEOTRAIN_SCENARIOS:-} || " $GEOTRAIN_SCENARIOS " == *" $name "* ]] || continue
  # GPipe, the paper's schedule (DT-FM streams all forwards, then all
  # backwards); on world-wide also 1F1B, geotrain's default, as a check that
  # the comparison does not hang on the schedule.
  for placement in planned rank-order random; do run "$name" "$file" "$options" "$placement" gpipe ""; done
  if [[ $name == world-wide ]]; then
    for placement in planned rank-order; do run "$name" "$file" "$options" "$placement" 1f1b -1f1b; done
  fi
done
for python in python3 /usr/bin/python3; do "$python" -c 'import h5py, matplotlib' 2>/dev/null && break; done
"$python" analysis/emulation_report.py "$out" analysis/results/emulation.md
