#!/usr/bin/env bash
# Local steps at the paper's scale, simulated: `geotrain simulate` on the
# world-wide network with GPT3-XL 40 layers, batch 4096 (the paper's largest
# configuration, the DT-FM runtime's settings: GPipe in flushes of 64, the
# paper's exchange, vocabulary 30,592, no LM head), synchronous and with H
# local steps per outer wire. Prints a markdown section on stdout.
#
#   bash bench/local_steps_simulated.sh > section.md     (build/release/geotrain)
#
# Environment: STEPS="10 50 100 500", WIRES="fp32 int8 int4".
set -euo pipefail
cd "$(dirname "$0")/.."
geotrain=build/release/geotrain
steps=${STEPS:-"10 50 100 500"}
wires=${WIRES:-"fp32 int8 int4"}
base="--scenario inputs/scenarios/world-wide.toml --model inputs/models/gpt3-xl.toml --layers 40 --batch 4096 --vocabulary 30592"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# case name | extra flags. Activations int8 both ways: issue 23's compression
# (the pipeline links inside a site, 2 Gbit/s, are then no longer slower
# than the compute). Flushes of 64 fit a 16 GB V100, of 128 a 32 GB one.
act="--compress-activations int8 --compress-activation-gradients int8"
cases=("sync|--local-steps 0" "sync, activations int8|--local-steps 0 $act")
for h in $steps; do
  for w in $wires; do cases+=("H $h $w|--local-steps $h --outer-wire $w"); done
done
cases+=("H 50 int8, 5 fragments|--local-steps 50 --outer-wire int8 --outer-fragments 5"
        "H 50 int8, activations int8|--local-steps 50 --outer-wire int8 $act"
        "H 50 int4, activations int8|--local-steps 50 --outer-wire int4 $act"
        "H 100 int4, activations int8|--local-steps 100 --outer-wire int4 $act"
        "H 50 int8, 5 fragments, activations int8|--local-steps 50 --outer-wire int8 --outer-fragments 5 $act"
        "H 50 int8, flushes of 128|--local-steps 50 --outer-wire int8 --pipeline-micro-batches 128"
        "H 50 int8, activations int8, flushes of 128|--local-steps 50 --outer-wire int8 $act --pipeline-micro-batches 128")
i=0
for c in "${cases[@]}"; do
  name=${c%%|*} flags=${c#*|}
  # shellcheck disable=SC2086
  "$geotrain" simulate $base $flags --json > "$work/$i.json"
  printf '%s\t%s\t%s\n' "$name" "$flags" "$work/$i.json" >> "$work/index"
  i=$((i + 1))
done

python3 - "$work/index" "$base" <<'PY'
import json, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
base = sys.argv[2]
results = [(name, flags, json.load(open(path))) for name, flags, path in rows]
sync = results[0][2]
print("## Simulated at the paper's scale\n")
print("Regenerate: `bash bench/local_steps_simulated.sh` (prints this section; a minute, the planner runs per case).")
print("Each row is one `build/release/geotrain simulate " + base + " FLAGS` with the row's flags;")
print("DT-FM's runtime settings (GPipe in flushes of 64 unless `--pipeline-micro-batches` says, overlapped sends,")
print("the paper's DATAP exchange, recomputation, no LM head), 64 V100 at the one calibrated efficiency 0.34;")
print("the placement planned for the row's model (local steps: DATAP / H in the cost model).")
print("`sync` is issue 23's starting point (1.39 PFLOPS). Model: src/plan/README.md, \"Local steps\".\n")
print("| case | flags | step s (amortised) | PFLOPS | compute utilisation (mean) | outer sync wait s/step | bytes crossing sites / step | DP bytes crossing sites / step | vs sync |")
print("|---|---|---|---|---|---|---|---|---|")
for name, flags, d in results:
    wait = d.get("outer_exposed_s", 0.0)
    print(f"| {name} | `{flags}` | {d['iteration_s']:.2f} | {d['pflops']:.3f} | {100 * d['utilisation_mean']:.1f}% | "
          f"{wait:.3f} | {d['cross_site_bytes_per_step'] / 1e9:.2f} GB | {d['cross_site_datap_bytes'] / 1e9:.3f} GB | "
          f"{d['pflops'] / sync['pflops']:.2f}x |")
best = max(results, key=lambda r: r[2]["pflops"])
print(f"\nBest: {best[0]}, {best[2]['pflops']:.3f} PFLOPS at {100 * best[2]['utilisation_mean']:.1f}% compute utilisation "
      f"(goal of issue 17: >= 2.3 PFLOPS).")
PY
