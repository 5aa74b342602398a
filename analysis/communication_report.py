#!/usr/bin/env python3
"""Keeping the devices busy on the emulated world-wide network: the table of
jobs/emulate/communication.sh's runs (step time measured and predicted,
compute utilisation, speedups over today's planned fp32 run and over rank
order, both measured in the same session), written to REPORT.md's sibling
communication-emulation.md.

usage: communication_report.py RUN_DIR REPORT.md
(RUN_DIR holds world-wide-<placement><variant>.h5 timing files.)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emulation_report  # noqa: E402
import geotrain_timing as gt  # noqa: E402

# (file stem, what differs from the planned fp32 GPipe run of experiment.sh)
VARIANTS = (
    ("rank-order", "rank order (Megatron's placement), fp32, GPipe, sum after the backward"),
    ("planned", "planned, fp32, GPipe, 4 x 2 sequences, sum after the backward (today)"),
    ("planned-overlap", "+ gradient sum in 1 MiB buckets from the last backward"),
    ("planned-m8", "8 micro-batches of 1 sequence (same batch), no buckets"),
    ("planned-overlap-int8", "+ buckets + int8 activations, activation gradients and gradients"),
    ("planned-overlap-int8-m8", "+ buckets + int8 everything + 8 micro-batches of 1"),
    ("planned-overlap-int4-m8", "+ buckets + int4 everything + 8 micro-batches of 1"),
    ("planned-1f1b-overlap-int8-m8", "as above with int8, 1F1B"),
)


def rows_of(run_dir):
    rows = []
    for stem, what in VARIANTS:
        path = os.path.join(run_dir, f"world-wide-{stem}.h5")
        if os.path.exists(path):
            rows.append((stem, what, gt.summarize(gt.load(path))))
    return rows


def table(rows):
    base = {stem: s["measured_iteration_s"] for stem, _, s in rows}
    lines = ["| run | measured s/step | predicted s/step | error | compute utilisation mean (min) | "
             "vs planned fp32 | vs rank order |", "|---|---:|---:|---:|---:|---:|---:|"]
    for stem, what, s in rows:
        measured = s["measured_iteration_s"]
        error = f"{100 * s['prediction_error']:+.0f}%" if s["prediction_error"] is not None else "n/a"
        versus = [f"{base[peer] / measured:.2f}x" if peer in base and measured > 0 else "" for peer in
                  ("planned", "rank-order")]
        lines.append(f"| {what} | {measured:.3f} | {s['predicted_iteration_s']:.3f} | {error} | "
                     f"{100 * s['compute_utilisation_mean']:.0f}% ({100 * s['compute_utilisation_min']:.0f}%) | "
                     f"{versus[0]} | {versus[1]} |")
    return lines


def main():
    run_dir, report = sys.argv[1:3]
    rows = rows_of(run_dir)
    if not rows:
        sys.exit(f"communication_report.py: no world-wide-*.h5 timing files in {run_dir}")
    lines = ["# Keeping the devices busy on the emulated world-wide network\n",
             "Regenerate (root, about 10 minutes on 2 cores): `bash jobs/emulate/communication.sh` (writes "
             "`runs/emulate-communication/*.h5`, then `analysis/communication_report.py runs/emulate-communication "
             "analysis/results/communication.md`, which writes this file beside it).\n",
             f"Machine: {emulation_report.machine_facts()}; the emulation of "
             "[emulation.md](emulation.md): 8 ranks = 4 stages x 2 replicas in Oregon, Virginia, Tokyo and London, "
             "bandwidth x0.05, `inputs/models/emulation.toml`, 16 sequences of 128 tokens per step, every run "
             "in the same session. Compute utilisation: forward + backward time over the step time, per rank "
             "(mean and least over the 8 ranks), the warm-up step left out. Prediction: the simulator on the "
             "same matrix and plan with the run's wire sizes and buckets, compute calibrated per stage from "
             "the run's medians.\n"]
    lines += table(rows)
    lines.append("")
    path = os.path.join(os.path.dirname(report), "communication-emulation.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
