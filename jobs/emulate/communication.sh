#!/usr/bin/env bash
# Keeping the devices busy on the emulated world-wide network (issue "Keep
# the devices busy"): the same model, steps and network as experiment.sh's
# world-wide runs, today's planned fp32 GPipe run and the rank-order run as
# the peers in the same session, then the planned placement with
#   overlap       the gradient sum in 1 MiB buckets from the last backward
#                 (this model's stage holds ~6.3 MB of gradient: 25 MiB,
#                 the default, would never start a bucket early)
#   int8 / int4   activations, their gradients and the gradients encoded
#   m8            8 micro-batches of 1 sequence per replica instead of 4 of 2
#                 (the same global batch and tokens; the flush simulate
#                 recommends hides more fill and drain)
# and analysis/communication_report.py writes the table into
# analysis/results/communication.md. Root; ~10 minutes on 2 cores.
#
#   bash jobs/emulate/communication.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source jobs/emulate/run_emulated.sh
start_experiment runs/emulate-communication 6 "$@"
file=$world_wide_file
options=$world_wide_sites
after="--network.gradient_bucket_mb=0"
buckets="--network.gradient_bucket_mb=1"
int8="--compression.gradients=int8 --compression.activations=int8 --compression.activation_gradients=int8"
int4="--compression.gradients=int4 --compression.activations=int4 --compression.activation_gradients=int4"
m8="--train.gradient_accumulation=8 --train.micro_batch_sequences=1"
# shellcheck disable=SC2086  # option lists are words
{
  run world-wide "$file" "$options" planned gpipe "" $after
  run world-wide "$file" "$options" rank-order gpipe "" $after
  run world-wide "$file" "$options" planned gpipe -overlap $buckets
  run world-wide "$file" "$options" planned gpipe -m8 $after $m8
  run world-wide "$file" "$options" planned gpipe -overlap-int8 $buckets $int8
  run world-wide "$file" "$options" planned gpipe -overlap-int8-m8 $buckets $int8 $m8
  run world-wide "$file" "$options" planned gpipe -overlap-int4-m8 $buckets $int4 $m8
  run world-wide "$file" "$options" planned 1f1b -1f1b-overlap-int8-m8 $buckets $int8 $m8
}
for python in python3 /usr/bin/python3; do "$python" -c 'import h5py, matplotlib' 2>/dev/null && break; done
"$python" analysis/communication_report.py "$out" analysis/results/communication.md
