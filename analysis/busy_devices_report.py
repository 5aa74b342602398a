#!/usr/bin/env python3
"""Issue 23's utilisation goal on the emulated world-wide network: the
`busy` section of jobs/emulate/local_steps.sh (its peers, the planner's 4 x 2
layout with local steps, pipelines inside sites) beside the convergence of
the same settings at equal tokens (bench/local_steps.sh LAYOUT=inside8).

Per run: the step time, the speedups over the synchronous peers of the same
session, compute utilisation (forward + backward time over the step time,
mean and least over ranks), device-time utilisation (what a rank computes
per step, timed alone and spread over the machine's cores, over the step
time) and the validation loss at equal tokens against synchronous training.
With the `busy-capped` runs present (every rank a device of fixed speed:
emulate.py --cpus-per-rank), the same table for them. The "## Reading"
section, written by hand, is kept when the tables are regenerated.

usage: busy_devices_report.py EMULATION_DIR CONVERGENCE_SUMMARY.json REPORT.md
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emulation_report  # noqa: E402
import geotrain_timing as gt  # noqa: E402
import low_communication_report as lc  # noqa: E402

CALIBRATION = "calibration-whole-model-2-sequences"
RUNS = (  # (file stem, what it is, its convergence case in the summary)
    ("planned", "4 stages x 2 replicas, planned, synchronous fp32 (issue 23's baseline)", None),
    ("rank-order", "4 stages x 2 replicas, rank order, synchronous fp32", None),
    ("planned-m8-H20-int8all", "the planner's 4 x 2, 8 micro-batches of 1, H = 20, all int8 (low_communication.md)", None),
    ("planned-m8-H20-int8all-tied8", "the same, the tied embedding's per-step sum at int8 too", None),
    ("rank-order-inside-H20-F5-int4", "pipelines inside sites (2 x 4), H = 20, 5 fragments streamed at int4",
     "H20-F5-int4-momentum0.9"),
    ("rank-order-inside-H20-F5-int4-act8", "the same, activations and their gradients at int8",
     "H20-F5-int4-act8-momentum0.9"),
    ("rank-order-inside-H10-F5-int4", "pipelines inside sites, H = 10, 5 fragments streamed at int4",
     "H10-F5-int4-momentum0.9"),
    ("rank-order-inside-H10-F5-int4-act8", "the same, activations and their gradients at int8",
     "H10-F5-int4-act8-momentum0.9"),
)

# The busy-capped section's runs (devices of fixed speed), named in full: the rows they follow above are
# not among them.
CAPPED_RUNS = RUNS[:2] + (
    ("planned-m8-H20-int8all-tied8", "the planner's 4 x 2, 8 micro-batches of 1, H = 20, all int8, the tied "
     "embedding's per-step sum at int8 too", None),
    ("rank-order-inside-H20-F5-int4-act8", "pipelines inside sites (2 x 4), H = 20, 5 fragments streamed at int4, "
     "activations and their gradients at int8", "H20-F5-int4-act8-momentum0.9"),
    ("rank-order-inside-H20-int8-momentum0.9", "pipelines inside sites, H = 20, the whole stage at int8 every 20 "
     "steps (not streamed)", "H20-int8-momentum0.9"),
    ("rank-order-inside-H20-int8-act8-momentum0.9", "the same, activations and their gradients at int8",
     "H20-int8-act8-momentum0.9"),
)

# The busy-capped run with a synchronous start (its synchronous steps: its config's); and the convergence
# case whose run the projection follows, with its synchronous steps.
STARTED = ("rank-order-inside-S10-H20-F5-int4-act8", "S100-H20-F5-int4-act8-momentum0.9", 100)


def synchronous_start(run_dir, peers, device_s, finals, total_steps):
    """Rows for the run whose first steps are synchronous: each phase timed apart, and a run of
    `total_steps` with the convergence case's synchronous steps, from the two phases' per-step figures."""
    stem, case, case_synchronous = STARTED
    path = os.path.join(run_dir, f"world-wide-capped-{stem}.h5")
    if not os.path.exists(path):
        return []
    run = gt.load(path)
    synchronous = gt.config_value(run, "outer.synchronous_steps")
    steps = int(run.steps["wall_time"].shape[1])
    before, after = gt.phase(run, 2, synchronous), gt.phase(run, synchronous + 1, steps)
    weights = (case_synchronous, total_steps - case_synchronous)

    def per_step(p, key, rank):
        return p[key][rank] / (p["last"] - p["first"] + 1)
    projected = [sum(w * per_step(p, "rank_compute_s", r) for w, p in zip(weights, (before, after)))
                 / sum(w * per_step(p, "rank_wall_s", r) for w, p in zip(weights, (before, after)))
                 for r in range(len(before["rank_wall_s"]))]
    mixed = {"period_s": sum(w * p["period_s"] for w, p in zip(weights, (before, after))) / total_steps,
             "compute_utilisation_mean": sum(projected) / len(projected), "compute_utilisation_min": min(projected)}

    def row(what, p):
        return {"stem": stem, "what": what, "case": None, "summary": {
            "measured_iteration_s": p["period_s"],
            "compute_utilisation_mean": p["compute_utilisation_mean"],
            "compute_utilisation_min": p["compute_utilisation_min"]}}
    rows = [r for r in peers if r["stem"] in ("planned", "rank-order")] + [
        row(f"steps 2-{synchronous}: synchronous, the gradient summed every step at int4", before),
        row(f"steps {synchronous + 1}-{steps}: local steps (H = 20, 5 fragments at int4)", after),
        dict(row(f"a run of {total_steps} steps, the first {case_synchronous} synchronous (from the two phases' "
                 "per-step figures)", mixed), case=case)]
    return (["## A synchronous start, then local steps\n",
             f"One run (`world-wide-capped-{stem}.h5`, in the same session as the table above): pipelines inside "
             f"sites, activations and their gradients at int8, `outer.synchronous_steps = {synchronous}`; each "
             "phase timed apart (`analysis/geotrain_timing.py` phase: the job's period over the phase's steps, "
             "compute over each rank's own time in them). The last row weighs the two phases' per-step figures by "
             f"the steps of the convergence case `{case}` ({total_steps} steps, {case_synchronous} synchronous), "
             "whose loss it shows.\n"]
            + table(rows, device_s, finals) + [""])


def table(rows, device_s, finals):
    return lc.versus_peers_table(rows, device_s, "validation loss at equal tokens vs synchronous",
                                 lc.loss_versus_sync(finals), digits=1)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    run_dir, summary_path, report = sys.argv[1:]
    rows = lc.emulation_rows(run_dir, RUNS)
    device_s = lc.device_compute_s(run_dir, CALIBRATION)
    measured = {r["case"]: r["summary"]["measured_iteration_s"] for r in rows if r["case"]}
    if "planned" in {r["stem"] for r in rows}:
        measured["sync"] = next(r for r in rows if r["stem"] == "planned")["summary"]["measured_iteration_s"]
    lines = ["# Keeping the devices busy: which layout reaches 60% on the world-wide emulation\n",
             "Regenerate (root, nothing else running): `SECTIONS=busy bash jobs/emulate/local_steps.sh` (about 12 "
             "minutes on 2 cores), `SECTIONS=busy-capped bash jobs/emulate/local_steps.sh` (about 10 minutes), "
             "`STEPS=1000 LAYOUT=inside8 CASES=\"sync H20-F5-int4-momentum0.9 "
             "H10-F5-int4-momentum0.9 H20-F5-int4-act8-momentum0.9 H10-F5-int4-act8-momentum0.9 "
             "H20-F5-int4-lr1-momentum0.9 H10-int8-momentum0.9 H20-int8-lr0.5-momentum0.9 H20-int8-momentum0.9 "
             "H4-F4-int4-averaged H20-F5-int8-momentum0.9 H8-F4-int4-averaged H20-int8-act8-momentum0.9 "
             "H20-int8-lr0.85-momentum0.9 H20-int8-lr1-momentum0.9 H30-int8-momentum0.9 S50-H20-F5-int4-act8-momentum0.9 "
             "S100-H20-F5-int4-act8-momentum0.9 S20-H20-F5-int4-act8-momentum0.9 S100-H20-int8-act8-momentum0.9 "
             "S50-H20-int8-act8-momentum0.9\" "
             "bash bench/local_steps.sh runs/bench-inside8-1000/summary.json` (about 55 minutes), then "
             "`python3 analysis/busy_devices_report.py runs/emulate-local-steps runs/bench-inside8-1000/summary.json "
             "analysis/results/busy_devices.md`.\n",
             f"Machine: {emulation_report.machine_facts()}; the emulation of [emulation.md](emulation.md) and "
             "[communication-emulation.md](communication-emulation.md): 8 ranks in Oregon, Virginia, Tokyo and "
             "London (2 each), bandwidth x0.05, `inputs/models/emulation.toml`, 16 sequences of 128 tokens per "
             "step, 40 steps, every run in one session. Peers: the planned and rank-order synchronous fp32 runs of "
             "the same session (issue 23's baselines).\n",
             "Compute utilisation: forward + backward time over the step time per rank, the warm-up step left out. "
             "Device-time utilisation: what each rank computes per step (2 sequences' worth of the whole model in "
             "every layout here), timed on one rank alone "
             + (f"({CALIBRATION}: {device_s:.3f} s per step on a device of cores/ranks of a core)" if device_s else "")
             + ", over the step time: 8 ranks share 2 cores, so a rank's own compute time stretches with whatever "
             "else runs at the same moment.\n",
             "Loss: the same settings in `bench/local_steps.sh` (model `tiny`, 1000 steps, 8 ranks = 2 stages x 4 "
             "replicas, 16 sequences per step, the same tokens in every case), final validation loss against "
             "synchronous training; the planner's 4 x 2 row's loss is in low_communication.md (-1.60%).\n"]
    finals = lc.final_losses(summary_path)
    lines += table(rows, device_s, finals) + [""]
    capped = lc.emulation_rows(run_dir, CAPPED_RUNS, "world-wide-capped")
    if capped:
        capped_device_s = lc.device_compute_s(run_dir, CALIBRATION + "-capped")
        lines += ["## Devices of fixed speed\n",
                  lc.fixed_speed_note("SECTIONS=busy-capped bash jobs/emulate/local_steps.sh", 0.22, 8,
                                      CALIBRATION + "-capped", capped_device_s) + " Peers: the capped synchronous runs.\n"]
        lines += table(capped, capped_device_s, finals) + [""]
        with open(summary_path) as f:
            convergence_steps = json.load(f)["steps"]
        lines += synchronous_start(run_dir, capped, capped_device_s, finals, convergence_steps)
    lines += ["## Convergence at equal tokens, pipelines inside sites\n"]
    lines += lc.convergence(summary_path, measured, os.path.join(os.path.dirname(report), "busy_devices.png"))
    lc.finish_report(report, lines)


if __name__ == "__main__":
    main()
