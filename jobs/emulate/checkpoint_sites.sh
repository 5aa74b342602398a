#!/usr/bin/env bash
# Checkpoints across emulated sites: the bytes each checkpoint form sends
# between sites, measured twice (the timing files' checkpoint events, and
# the emulated router's byte counters against a run without checkpoints).
# Two sites of jobs/emulate/emulate.py's world-wide emulation (Oregon, Tokyo;
# 2 ranks each, bandwidth x0.05), inputs/models/emulation.toml as 2 stages x
# 2 replicas, the planned placement, a checkpoint every 2 steps:
#   none      no checkpoints (the router's baseline)
#   single    rank 0 gathers every stage
#   per_site  each site's ranks write their site's shard
#   parallel  one file, every rank writing its own part
# usage: jobs/emulate/checkpoint_sites.sh [STEPS] (as root; about 5 minutes)
# then: /usr/bin/python3 analysis/checkpoint_sites_report.py runs/emulate-checkpoints
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf runs/emulate-checkpoints
source jobs/emulate/run_emulated.sh
start_experiment runs/emulate-checkpoints 6 "$@"
file=$world_wide_file
options="--sites Oregon,Tokyo --devices 2,2 --bandwidth-scale 0.05"
layout="--pipeline.stages=2 --train.gradient_accumulation=4 --train.micro_batch_sequences=1"
# shellcheck disable=SC2086  # option lists are words
for form in none single per_site parallel; do
  if [[ $form == none ]]; then
    run sites "$file" "$options" planned gpipe "-$form" $layout
  else
    run sites "$file" "$options" planned gpipe "-$form" $layout --checkpoint.dir="$PWD/$out/ckpt-$form" --checkpoint.form="$form" \
      --checkpoint.every_steps=2 --checkpoint.keep=1
  fi
done
echo "written: $out (analysis/checkpoint_sites_report.py reads it)"
