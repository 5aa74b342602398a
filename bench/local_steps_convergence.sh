#!/usr/bin/env bash
# Every convergence summary of analysis/results/low_communication.md, one
# bench/local_steps.sh per layout and length (about 90 minutes on 2 cores,
# nothing else running), then the report (which also reads the emulated
# runs of jobs/emulate/local_steps.sh, run first).
#
#   bash bench/local_steps_convergence.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bench=bench/local_steps.sh
runs=runs
bash "$bench" "$runs/bench-local-steps/summary.json"
LAYOUT=whole8 CASES="sync H10-int8 H20-int8 H40-int8 H20-int8-averaged" bash "$bench" "$runs/bench-local-steps-whole8/summary.json"
LAYOUT=whole8 SEQUENCES=4 CASES="sync H20-int8 H40-int8 H40-int4" bash "$bench" "$runs/bench-local-steps-whole8-s4/summary.json"
STEPS=1000 CASES="sync H20-int8 H40-int8 H20-int8-momentum0.9 H40-int8-momentum0.9" bash "$bench" "$runs/bench-local-steps-1000/summary.json"
STEPS=1000 LAYOUT=inside8 CASES="sync H20-int8 H40-int8 H20-int8-momentum0.9" bash "$bench" "$runs/bench-local-steps-inside8-1000/summary.json"
STEPS=500 LAYOUT=inside8 SEQUENCES=16 CASES="sync H20-int8-momentum0.9 H40-int8-momentum0.9" \
  bash "$bench" "$runs/bench-local-steps-inside8-s16-500/summary.json"
STEPS=1000 LAYOUT=whole8 CASES="sync H20-int8 H40-int8 H20-int8-inner-lr3.5e-4 H20-int8-momentum0.9 H20-int8-lr1-momentum0.9 H40-int8-momentum0.9" \
  bash "$bench" "$runs/bench-local-steps-whole8-1000/summary.json"
STEPS=1000 LAYOUT=pipelines4x2 CASES="sync H20-int8all-momentum0.9 H20-F5-int4all-momentum0.9" \
  bash "$bench" "$runs/bench-local-steps-pipelines4x2-1000/summary.json"
STEPS=500 LAYOUT=pipelines4x2 SEQUENCES=32 \
  CASES="sync H20-F5-int4-momentum0.9 H20-F5-int4-act8-momentum0.9 H40-F5-int4-momentum0.9" \
  bash "$bench" "$runs/bench-local-steps-pipelines4x2-s32-500/summary.json"
/usr/bin/python3 analysis/low_communication_report.py runs/emulate-local-steps "$runs/bench-local-steps/summary.json" \
  "$runs/bench-local-steps-1000/summary.json" "$runs/bench-local-steps-inside8-1000/summary.json" \
  "$runs/bench-local-steps-inside8-s16-500/summary.json" \
  "$runs/bench-local-steps-whole8/summary.json" "$runs/bench-local-steps-whole8-s4/summary.json" \
  "$runs/bench-local-steps-whole8-1000/summary.json" "$runs/bench-local-steps-pipelines4x2-1000/summary.json" \
  "$runs/bench-local-steps-pipelines4x2-s32-500/summary.json" analysis/results/low_communication.md
