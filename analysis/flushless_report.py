#!/usr/bin/env python3
"""The flushless pipeline (pipeline.flushless, PipeDream-2BW) on the emulated
world-wide network beside its flushed peers, and its convergence at equal
tokens against synchronous training.

Reads the timing files of jobs/emulate/local_steps.sh (its flushless section
and the runs it compares with) and the convergence summary of
bench/local_steps.sh (LAYOUT=pipelines4x2 with the flushless cases); writes
analysis/results/flushless.md and its plot.

usage: flushless_report.py RUN_DIR CONVERGENCE_SUMMARY.json REPORT.md
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emulation_report  # noqa: E402
import geotrain_timing as gt  # noqa: E402
import low_communication_report as lc  # noqa: E402

SEQUENCES_PER_STEP = 16
RUNS = (  # (file stem, what it is, its convergence case)
    ("planned", "planned, GPipe, synchronous fp32 (issue 23's baseline)", None),
    ("rank-order", "rank order, GPipe, synchronous fp32", None),
    ("planned-m8-H20-int8all", "planned, GPipe flushed every step, H = 20, all int8 (the best flushed run)",
     "H20-int8all-momentum0.9"),
    ("planned-m8-fp32-flushless", "flushless, replicas summing every step, fp32", "flushless"),
    ("planned-m8-fp32-flushless-ahead1", "the same, one more forward ahead per hop", "flushless"),
    ("planned-m8-int8all-flushless", "flushless, replicas summing every step, all int8", "flushless-int8all"),
    ("planned-m8-int8all-flushless-ahead1", "the same, one more forward ahead per hop", "flushless-int8all"),
    ("planned-m8-H20-int8all-flushless", "flushless, H = 20, all int8", "H20-int8all-momentum0.9-flushless"),
    ("planned-m8-H20-int8all-flushless-ahead1", "the same, one more forward ahead per hop",
     "H20-int8all-momentum0.9-flushless"),
)


def device_seconds(run_dir):
    """What the job computes per step if its ranks had the machine's cores to themselves: one rank
    alone trains 8 sequences of the whole model (the calibration run); a step trains
    SEQUENCES_PER_STEP, spread over the cores."""
    path = os.path.join(run_dir, lc.CALIBRATION)
    if not (os.path.exists(path + ".h5") and os.path.exists(path + ".json")):
        return None
    with open(path + ".json") as f:
        cores = json.load(f)["cores"]
    alone = gt.summarize(gt.load(path + ".h5"))["ranks"][0]["compute_per_step_s"]
    return alone * SEQUENCES_PER_STEP / 8 / cores


def emulation_table(rows, device_s):
    def router(r):
        return f"{r['router_bytes'] / 1e6:.1f} MB" if r["router_bytes"] is not None else "n/a"
    return lc.versus_peers_table(rows, device_s, "bytes between sites / step (router, on the wire)", router)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    run_dir, summary_path, report = sys.argv[1:]
    rows = lc.emulation_rows(run_dir, RUNS)
    device_s = device_seconds(run_dir)
    # The wall-time curves: each case at its fastest emulated step.
    emulated = {}
    for r in rows:
        if r["case"]:
            step = r["summary"]["measured_iteration_s"]
            emulated[r["case"]] = min(step, emulated.get(r["case"], step))
    if "planned" in {r["stem"] for r in rows}:
        emulated["sync"] = next(r for r in rows if r["stem"] == "planned")["summary"]["measured_iteration_s"]
    lines = ["# Flushless pipeline (PipeDream-2BW): no fill or drain per step\n",
             "## Emulated world-wide network\n",
             "Regenerate (root, nothing else running): `SECTIONS=flushless bash jobs/emulate/local_steps.sh` "
             "(about 25 minutes on 2 cores; its calibration run comes from the `two-sites` section), then "
             "`STEPS=1000 LAYOUT=pipelines4x2 CASES=\"sync H20-int8all-momentum0.9 flushless flushless-int8all "
             "H20-int8all-momentum0.9-flushless\" bash bench/local_steps.sh runs/bench-flushless/summary.json`, "
             "then `python3 analysis/flushless_report.py runs/emulate-local-steps runs/bench-flushless/summary.json "
             "analysis/results/flushless.md`.\n",
             f"Machine: {emulation_report.machine_facts()}; the emulation of [emulation.md](emulation.md): 8 ranks "
             "in Oregon, Virginia, Tokyo and London (2 each), bandwidth x0.05, `inputs/models/emulation.toml`, "
             f"{SEQUENCES_PER_STEP} sequences of 128 tokens per step, 40 steps; the planner's placement (4 stages x "
             "2 replicas, each pipeline across two oceans' worth of sites) unless the row says rank order; 8 "
             "micro-batches of 1 sequence per replica except the synchronous baselines (issue 23's runs: 4 of 2). "
             "Flushless runs: 1F1B, no flush between steps, each step's gradient computed on the weights one "
             "update old. Peers: the synchronous and flushed runs in the same session.\n",
             "Compute utilisation: forward + backward time over the step time per rank, the warm-up step left "
             "out. Device-time utilisation: what the job computes per step, timed on one rank alone and spread "
             f"over the machine's cores ({lc.CALIBRATION}: {device_s:.3f} s per step), over the step time: 8 "
             "ranks share 2 cores, so a rank's measured compute stretches with whatever else runs at the same "
             "moment, and the device-time column is the comparable one.\n" if device_s else ""]
    lines += emulation_table(rows, device_s) + [""]
    lines += ["## Convergence at equal tokens\n"]
    lines += lc.convergence(summary_path, emulated, os.path.join(os.path.dirname(report), "flushless.png"))
    lines += lc.kept_sections(report)
    with open(report, "w") as f:
        f.write("\n".join(lines).rstrip() + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
