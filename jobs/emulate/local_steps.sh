#!/usr/bin/env bash
# Local steps on the emulated world-wide network (issue "Low-communication
# data parallelism"): the same model, network and tokens per step as
# communication.sh (inputs/models/emulation.toml, 16 sequences of 128 tokens
# per step, Oregon, Virginia, Tokyo, London with 2 ranks each, bandwidth
# x0.05), 40 steps (every run ends with a synchronisation of the whole
# model, so that the replicas end identical; the more steps, the less it
# weighs per step). Peers in the same session: today's planned synchronous run (4
# stages x 2 replicas, fp32) and the rank-order one. Then whole pipelines
# inside sites (2 stages x 4 replicas; rank order puts ranks j and j + 4,
# both in site j, in pipeline j), data parallel across them:
#   sync          synchronous, the gradient summed every step (1 MiB buckets)
#   H10           outer.local_steps = 10, fp32 pseudo-gradients
#   H10-int8      the same at 8 bits with error feedback
#   H10-F5-int4   streamed: 5 fragments, one every 2 steps, each exchange
#                 during the next inner step, 4 bits
#   H20-int8      one synchronisation in the run (at its end)
#   H20-F5-int4   streamed: a fragment every 4 steps
#   pp1-H10-int8  every rank a whole model (8 replicas, 2 per site): no
#                 pipeline bubble
#   pp1-H10-int8-sites  the same, the 2 replicas of a site summing every step
#                 (outer.sync_within_site)
#   pp1-H20-F5-int4  whole models, streamed
#   pp1-H20-int8  whole models, H = 20
#   pp1-H40-int8  whole models, H = 40 (one synchronisation per 40 steps)
#   pp1-mb2-H20-int8, pp1-mb2-H40-int8  the same with each replica's 2
#                 sequences in one micro-batch (larger matrix products)
#   planned-H20-int8  the planner's placement (4 stages x 2 replicas: few,
#                 large replicas, the layout whose loss stays near
#                 synchronous training), H = 20, int8, DiLoCo's momentum 0.9
# Then issue 17's utilisation over longer runs (LONG_STEPS, 120: the outer
# synchronisations at steps 40, 80 and 120), whole models, one micro-batch
# of 2, 4 or 8 sequences per replica (16, 32 or 64 per step):
#   pp1-mb2-H40-int8-long, pp1-mb4-H40-int4-long, pp1-mb8-H40-int4-long
# and pipelines inside sites with 64 sequences per step (16 micro-batches of
# 1 per replica: the pipeline's fill and drain are 1/17 of a step), int8,
# DiLoCo's momentum 0.9:
#   inside-s16-H20-int8-long, inside-s16-H40-int8-long
# Then the planner's placement with local steps (each pipeline 4 stages in 2
# sites: one crossing between continents) made to keep its devices busy: 8
# micro-batches of 1 sequence per replica, activations, their gradients and
# the pseudo-gradients encoded, DiLoCo's momentum 0.9:
#   planned-m8-H20-int8all, planned-m8-H20-F5-int4all (streamed)
# Then issue 17's layouts on two continents: Tokyo and London, 4 ranks each
# (the same links, bandwidth x0.05), 64 sequences per step, 2 sites' worth of
# replicas (the layouts whose loss stays near synchronous training), the
# planner's placement, DiLoCo's momentum 0.9, 5 fragments streamed at int4:
#   tokyo-london-planned-sync   a 4-stage pipeline in each site, synchronous
#                               fp32, 1 MiB buckets (the peer)
#   -H20-F5-int4, -H40-F5-int4  the same pipelines (32 micro-batches of 1),
#                               local steps
#   -1f1b-H20-F5-int4           1F1B instead of GPipe
#   -H20-F5-int4-act8           activations and their gradients at int8
#   -1f1b-H20-F5-int4-act8      both: 1F1B and int8 activations
#   -pp2-sites-H20-F5-int4      2-stage pipelines, a site's 2 summing every
#                               step (outer.sync_within_site)
#   -pp1-mb8-sites-H20-F5-int4  whole models, one micro-batch of 8, a site's
#                               4 summing every step
# and the calibration: one rank alone (no emulation) training 8 sequences of
# the whole model per step, the compute every rank above does per step.
# SECTIONS (default: every group below but "busy", which repeats the peers
# for issue 23's report, and the -capped ones, which need the cgroup cpu
# controller) picks the groups to run.
# The timing files and the router's per-pair byte counts go to
# runs/emulate-local-steps/; analysis/low_communication_report.py reads them.
# Root; ~80 minutes on 2 cores, nothing else running. PEERS=0 skips the
# synchronous runs (keeping earlier ones in the folder).
#
#   bash jobs/emulate/local_steps.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source jobs/emulate/run_emulated.sh
start_experiment runs/emulate-local-steps 40 "$@"
file=$world_wide_file
options=$world_wide_sites
inside="--pipeline.stages=2 --train.gradient_accumulation=4 --train.micro_batch_sequences=1 --network.gradient_bucket_mb=1"
whole="--pipeline.stages=1 --train.gradient_accumulation=2 --train.micro_batch_sequences=1"
whole2="--pipeline.stages=1 --train.gradient_accumulation=1 --train.micro_batch_sequences=2"
# The calibration of a device: one rank alone, no emulation, training the
# whole model on SEQUENCES x MICRO_BATCHES sequences per step (`calibrate
# SEQUENCES MICRO_BATCHES [RANKS [CPUS]]`), 3 times: the report takes the
# fastest (a run right after the emulation's teardown can be slowed). Writes
# $out/calibration-whole-model-N-sequences-{1,2,3}.h5 and .json (cores, the
# RANKS that share them in the runs it calibrates: 8 unless given). CPUS: the
# rank runs as one device of fixed speed (emulate.py device --cpus-per-rank),
# the files named -capped.
calibrate() {
  local name="calibration-whole-model-$(($1 * $2))-sequences${4:+-capped}" device=()
  [[ -n ${4:-} ]] && device=(python3 jobs/emulate/emulate.py device --cpus-per-rank "$4" --)
  rm -f "$out/$name"*.h5
  for repeat in 1 2 3; do
    OMP_NUM_THREADS=1 "${device[@]}" build/release/geotrain train inputs/quickstart.toml --model.file=inputs/models/emulation.toml \
      --pipeline.stages=1 --train.micro_batch_sequences="$1" --train.gradient_accumulation="$2" --train.steps=12 \
      --optimizer.warmup_steps=2 --train.eval_every_steps=0 --checkpoint.dir= \
      --timing.file="$out/$name-$repeat.h5" > /dev/null
  done
  # getconf, not nproc: nproc follows the OMP_NUM_THREADS=1 exported above
  echo "{\"cores\": $(getconf _NPROCESSORS_ONLN), \"ranks\": ${3:-8}${4:+, \"cpus_per_rank\": $4}}" > "$out/$name.json"
}
sections=" ${SECTIONS:-short long inside-long planned-local two-sites two-sites-pp2 flushless two-sites-flushless} "
# shellcheck disable=SC2086  # option lists are words
if [[ $sections == *" short "* ]]; then
  if [[ ${PEERS:-1} != 0 ]]; then
    run world-wide "$file" "$options" planned gpipe "" --network.gradient_bucket_mb=0
    run world-wide "$file" "$options" rank-order gpipe "" --network.gradient_bucket_mb=0
    run world-wide "$file" "$options" rank-order gpipe -inside-sync $inside
  fi
  run world-wide "$file" "$options" rank-order gpipe -inside-H10 $inside --outer.local_steps=10
  run world-wide "$file" "$options" rank-order gpipe -inside-H10-int8 $inside --outer.local_steps=10 --compression.gradients=int8
  run world-wide "$file" "$options" rank-order gpipe -inside-H10-F5-int4 $inside --outer.local_steps=10 --outer.fragments=5 --compression.gradients=int4
  run world-wide "$file" "$options" rank-order gpipe -inside-H20-int8 $inside --outer.local_steps=20 --compression.gradients=int8
  run world-wide "$file" "$options" rank-order gpipe -inside-H20-F5-int4 $inside --outer.local_steps=20 --outer.fragments=5 --compression.gradients=int4
  run world-wide "$file" "$options" rank-order gpipe -pp1-H10-int8 $whole --outer.local_steps=10 --compression.gradients=int8
  run world-wide "$file" "$options" rank-order gpipe -pp1-H10-int8-sites $whole --outer.local_steps=10 --compression.gradients=int8 --outer.sync_within_site=true
  run world-wide "$file" "$options" rank-order gpipe -pp1-H20-F5-int4 $whole --outer.local_steps=20 --outer.fragments=5 --compression.gradients=int4
  run world-wide "$file" "$options" rank-order gpipe -pp1-H20-int8 $whole --outer.local_steps=20 --compression.gradients=int8
  run world-wide "$file" "$options" rank-order gpipe -pp1-H40-int8 $whole --outer.local_steps=40 --compression.gradients=int8
  run world-wide "$file" "$options" rank-order gpipe -pp1-mb2-H20-int8 $whole2 --outer.local_steps=20 --compression.gradients=int8
  run world-wide "$file" "$options" rank-order gpipe -pp1-mb2-H40-int8 $whole2 --outer.local_steps=40 --compression.gradients=int8
  run world-wide "$file" "$options" planned gpipe -H20-int8 --network.gradient_bucket_mb=0 --outer.local_steps=20 \
    --compression.gradients=int8 --outer.momentum=0.9
fi
steps=${LONG_STEPS:-120}
if [[ $sections == *" long "* ]]; then
  for sequences in 2 4 8; do
    wire=$([[ $sequences == 2 ]] && echo int8 || echo int4)
    run world-wide "$file" "$options" rank-order gpipe "-pp1-mb$sequences-H40-$wire-long" --pipeline.stages=1 \
      --train.gradient_accumulation=1 --train.micro_batch_sequences="$sequences" --outer.local_steps=40 \
      --compression.gradients="$wire"
  done
fi
if [[ $sections == *" inside-long "* ]]; then
  for h in 20 40; do
    run world-wide "$file" "$options" rank-order gpipe "-inside-s16-H$h-int8-long" --pipeline.stages=2 \
      --train.gradient_accumulation=16 --train.micro_batch_sequences=1 --outer.local_steps="$h" \
      --compression.gradients=int8 --outer.momentum=0.9
  done
fi
steps=${1:-40}
if [[ $sections == *" planned-local "* ]]; then
  m8="--train.gradient_accumulation=8 --train.micro_batch_sequences=1"
  all8="--compression.gradients=int8 --compression.activations=int8 --compression.activation_gradients=int8"
  all4="--compression.gradients=int4 --compression.activations=int4 --compression.activation_gradients=int4"
  run world-wide "$file" "$options" planned gpipe -m8-H20-int8all $m8 $all8 --network.gradient_bucket_mb=0 \
    --outer.local_steps=20 --outer.momentum=0.9
  run world-wide "$file" "$options" planned gpipe -m8-H20-F5-int4all $m8 $all4 --network.gradient_bucket_mb=0 \
    --outer.local_steps=20 --outer.fragments=5 --outer.momentum=0.9
fi
if [[ $sections == *" two-sites "* ]]; then
  pairs="--sites Tokyo,London --devices 4,4 --bandwidth-scale 0.05"
  m32="--train.gradient_accumulation=32 --train.micro_batch_sequences=1 --network.gradient_bucket_mb=1"
  local_f5="--outer.fragments=5 --compression.gradients=int4 --outer.momentum=0.9"
  sites="--outer.local_steps=20 $local_f5 --outer.sync_within_site=true --network.gradient_bucket_mb=1"
  run tokyo-london "$file" "$pairs" planned gpipe -sync $m32
  for h in 20 40; do
    run tokyo-london "$file" "$pairs" planned gpipe "-H$h-F5-int4" $m32 --outer.local_steps="$h" $local_f5
  done
  run tokyo-london "$file" "$pairs" planned 1f1b -1f1b-H20-F5-int4 $m32 --outer.local_steps=20 $local_f5
  run tokyo-london "$file" "$pairs" planned gpipe -H20-F5-int4-act8 $m32 --outer.local_steps=20 $local_f5 \
    --compression.activations=int8 --compression.activation_gradients=int8
  run tokyo-london "$file" "$pairs" planned 1f1b -1f1b-H20-F5-int4-act8 $m32 --outer.local_steps=20 $local_f5 \
    --compression.activations=int8 --compression.activation_gradients=int8
  run tokyo-london "$file" "$pairs" planned gpipe -pp2-sites-H20-F5-int4 --pipeline.stages=2 \
    --train.gradient_accumulation=16 --train.micro_batch_sequences=1 $sites
  run tokyo-london "$file" "$pairs" planned gpipe -pp1-mb8-sites-H20-F5-int4 --pipeline.stages=1 \
    --train.gradient_accumulation=1 --train.micro_batch_sequences=8 $sites
  calibrate 8 1
fi
# Issue 17's utilisation on two continents with 2 ranks per site (4 ranks: a
# device is half a core, not a quarter), 64 sequences per step, 32
# micro-batches of 1 per replica: the planner's synchronous layout (the peer),
# then local steps (5 fragments streamed at int4, momentum 0.9), where the
# planner puts a 2-stage pipeline inside each site:
#   tokyo-london-4-planned-sync, -H20-F5-int4, -H20-F5-int4-act8,
#   -H40-F5-int4-act8, -1f1b-H20-F5-int4-act8
# and the calibration of a device: one rank alone training the whole model on
# 16 sequences per step, what every rank of these runs computes per step.
# analysis/two_continents_report.py reads them.
# two-sites-pp2-capped: the same with every rank a device of fixed speed, 0.45
# of a core (emulate.py --cpus-per-rank: no rank borrows another's idle core),
# as tokyo-london-4-capped-*, and its calibration under the same cap.
two_sites_pp2() {  # NAME [EMULATE OPTIONS...]
  local name=$1 pairs="--sites Tokyo,London --devices 2,2 --bandwidth-scale 0.05 ${*:2}"
  local m32="--pipeline.stages=2 --train.gradient_accumulation=32 --train.micro_batch_sequences=1 --network.gradient_bucket_mb=1"
  local local_f5="--outer.fragments=5 --compression.gradients=int4 --outer.momentum=0.9"
  local act8="--compression.activations=int8 --compression.activation_gradients=int8"
  run "$name" "$file" "$pairs" planned gpipe -sync $m32
  run "$name" "$file" "$pairs" planned gpipe -H20-F5-int4 $m32 --outer.local_steps=20 $local_f5
  run "$name" "$file" "$pairs" planned gpipe -H20-F5-int4-act8 $m32 --outer.local_steps=20 $local_f5 $act8
  run "$name" "$file" "$pairs" planned gpipe -H40-F5-int4-act8 $m32 --outer.local_steps=40 $local_f5 $act8
  run "$name" "$file" "$pairs" planned 1f1b -1f1b-H20-F5-int4-act8 $m32 --outer.local_steps=20 $local_f5 $act8
}
if [[ $sections == *" two-sites-pp2 "* ]]; then
  two_sites_pp2 tokyo-london-4
  calibrate 1 16 4
fi
if [[ $sections == *" two-sites-pp2-capped "* ]]; then
  two_sites_pp2 tokyo-london-4-capped --cpus-per-rank 0.45
  calibrate 1 16 4 0.45
fi
# The planner's placement with a flushless pipeline (pipeline.flushless,
# PipeDream-2BW: one unbroken 1F1B stream, gradients one update stale), 8
# micro-batches of 1 sequence per replica, beside its peers in the same
# session (the planned and rank-order synchronous runs, the flushed int8 run):
#   planned-m8-int8all-flushless        replicas summing every step (int8
#                                       gradients, activations, their gradients)
#   planned-m8-H20-int8all-flushless    local steps on top (H = 20, momentum 0.9)
#   planned-m8-fp32-flushless           nothing compressed, summing every step
# each as 1F1B leads (flushless_ahead = 0) and with one more forward per hop
# ahead at the stages before the last (-ahead1: 7 micro-batches in flight at
# the first stage, 1F1B's 4).
# AHEADS ("0 1") picks the leads to run.
steps=${1:-40}
if [[ $sections == *" flushless "* ]]; then
  m8="--train.gradient_accumulation=8 --train.micro_batch_sequences=1"
  all8="--compression.gradients=int8 --compression.activations=int8 --compression.activation_gradients=int8"
  if [[ ${PEERS:-1} != 0 ]]; then
    run world-wide "$file" "$options" planned gpipe "" --network.gradient_bucket_mb=0
    run world-wide "$file" "$options" rank-order gpipe "" --network.gradient_bucket_mb=0
    run world-wide "$file" "$options" planned gpipe -m8-H20-int8all $m8 $all8 --network.gradient_bucket_mb=0 \
      --outer.local_steps=20 --outer.momentum=0.9
  fi
  # 1F1B's lead (ahead = 0) keeps 4 micro-batches in flight at the first stage, too few for
  # a round trip over three ocean hops; ahead = 1 keeps 7.
  for ahead in ${AHEADS:-0 1}; do
    lead="--pipeline.flushless=true --pipeline.flushless_ahead=$ahead"
    suffix=$([[ $ahead == 0 ]] && echo "" || echo "-ahead$ahead")
    run world-wide "$file" "$options" planned 1f1b "-m8-int8all-flushless$suffix" $m8 $all8 $lead
    run world-wide "$file" "$options" planned 1f1b "-m8-H20-int8all-flushless$suffix" $m8 $all8 $lead \
      --network.gradient_bucket_mb=0 --outer.local_steps=20 --outer.momentum=0.9
    run world-wide "$file" "$options" planned 1f1b "-m8-fp32-flushless$suffix" $m8 $lead
  done
fi
# The same on two continents (the two-sites layout, a 4-stage pipeline in each
# site, 32 micro-batches of 1 per replica), H = 20 unstreamed at int4 (the
# flushless stream takes no fragments yet), activations at int8: flushed
# GPipe beside the flushless stream one forward per hop ahead.
if [[ $sections == *" two-sites-flushless "* ]]; then
  pairs="--sites Tokyo,London --devices 4,4 --bandwidth-scale 0.05"
  m32="--train.gradient_accumulation=32 --train.micro_batch_sequences=1 --network.gradient_bucket_mb=1"
  act8="--outer.local_steps=20 --compression.gradients=int4 --outer.momentum=0.9 --compression.activations=int8 --compression.activation_gradients=int8"
  run tokyo-london "$file" "$pairs" planned gpipe -H20-int4-act8 $m32 $act8
  run tokyo-london "$file" "$pairs" planned 1f1b -H20-int4-act8-flushless-ahead1 $m32 $act8 \
    --pipeline.flushless=true --pipeline.flushless_ahead=1
fi
# Issue 23's utilisation, in one session: its peers (the planned and
# rank-order synchronous fp32 runs), the planner's 4 x 2 layout with local
# steps (planned-m8-H20-int8all, the layout whose loss holds; -tied8: its
# tied embedding's per-step sum across the ocean at int8 too), and pipelines
# inside sites (4 replicas of 2 stages, 4 micro-batches of 1 sequence each),
# streamed int4 pseudo-gradients, with and without int8 activations and
# activation gradients inside the site, at H = 20 and H = 10:
#   inside-H20-F5-int4, inside-H20-F5-int4-act8, inside-H10-F5-int4,
#   inside-H10-F5-int4-act8
# then the calibration of a device: one rank alone training the whole model
# on 2 sequences per step (2 micro-batches of 1), what every rank of these
# runs computes per step. analysis/busy_devices_report.py reads them.
if [[ $sections == *" busy "* ]]; then
  m8="--train.gradient_accumulation=8 --train.micro_batch_sequences=1"
  all8="--compression.gradients=int8 --compression.activations=int8 --compression.activation_gradients=int8"
  act8="--compression.activations=int8 --compression.activation_gradients=int8"
  run world-wide "$file" "$options" planned gpipe "" --network.gradient_bucket_mb=0
  run world-wide "$file" "$options" rank-order gpipe "" --network.gradient_bucket_mb=0
  run world-wide "$file" "$options" planned gpipe -m8-H20-int8all $m8 $all8 --network.gradient_bucket_mb=0 \
    --outer.local_steps=20 --outer.momentum=0.9
  run world-wide "$file" "$options" planned gpipe -m8-H20-int8all-tied8 $m8 $all8 --network.gradient_bucket_mb=0 \
    --outer.local_steps=20 --outer.momentum=0.9 --compression.tied_embedding=int8
  for h in 20 10; do
    streamed="--outer.local_steps=$h --outer.fragments=5 --compression.gradients=int4 --outer.momentum=0.9"
    run world-wide "$file" "$options" rank-order gpipe "-inside-H$h-F5-int4" $inside $streamed
    run world-wide "$file" "$options" rank-order gpipe "-inside-H$h-F5-int4-act8" $inside $streamed $act8
  done
  calibrate 1 2
fi
# busy-capped: the same runs' essentials with every rank a device of fixed
# speed, 0.22 of a core (emulate.py --cpus-per-rank; 8 ranks take 1.76 of the
# 2 cores, the emulator the rest), as world-wide-capped-*: the two peers, the
# planner's layout with the tied embedding at int8, pipelines inside sites
# with int8 activations, and the same pipelines with the setting whose loss
# is closest to synchronous training's at 4 replicas (H = 20 unstreamed at
# int8, momentum 0.9), without and with int8 activations; the streamed
# pipelines inside sites after a synchronous start (outer.synchronous_steps
# = 10: steps 1-10 sum every replica's gradient every step, at int4), whose
# two phases the report times apart; then the calibration under the same cap.
if [[ $sections == *" busy-capped "* ]]; then
  capped="$options --cpus-per-rank 0.22"
  m8="--train.gradient_accumulation=8 --train.micro_batch_sequences=1"
  all8="--compression.gradients=int8 --compression.activations=int8 --compression.activation_gradients=int8"
  act8="--compression.activations=int8 --compression.activation_gradients=int8"
  run world-wide-capped "$file" "$capped" planned gpipe "" --network.gradient_bucket_mb=0
  run world-wide-capped "$file" "$capped" rank-order gpipe "" --network.gradient_bucket_mb=0
  run world-wide-capped "$file" "$capped" planned gpipe -m8-H20-int8all-tied8 $m8 $all8 --network.gradient_bucket_mb=0 \
    --outer.local_steps=20 --outer.momentum=0.9 --compression.tied_embedding=int8
  run world-wide-capped "$file" "$capped" rank-order gpipe -inside-H20-F5-int4-act8 $inside --outer.local_steps=20 \
    --outer.fragments=5 --compression.gradients=int4 --outer.momentum=0.9 $act8
  run world-wide-capped "$file" "$capped" rank-order gpipe -inside-H20-int8-momentum0.9 $inside --outer.local_steps=20 \
    --compression.gradients=int8 --outer.momentum=0.9
  run world-wide-capped "$file" "$capped" rank-order gpipe -inside-H20-int8-act8-momentum0.9 $inside --outer.local_steps=20 \
    --compression.gradients=int8 --outer.momentum=0.9 $act8
  run world-wide-capped "$file" "$capped" rank-order gpipe -inside-S10-H20-F5-int4-act8 $inside --outer.synchronous_steps=10 \
    --outer.local_steps=20 --outer.fragments=5 --compression.gradients=int4 --outer.momentum=0.9 $act8
  calibrate 1 2 8 0.22
fi
echo "written: $out (analysis/low_communication_report.py reads it)"
