#!/usr/bin/env python3
"""Issue 17's utilisation goal on two continents with 2 ranks per site: the
`two-sites-pp2` section of jobs/emulate/local_steps.sh (Tokyo and London, 2
ranks each, 64 sequences per step; the planner's synchronous layout as the
peer, then local steps with a 2-stage pipeline inside each site) beside the
convergence of the same settings at equal tokens (bench/local_steps.sh
LAYOUT=pipelines2x2 SEQUENCES=32).

Per run: the step time and speedup over the synchronous peer, compute
utilisation (forward + backward time over the step time, mean and least over
ranks), device-time utilisation (what a rank computes per step, timed alone
and spread over the machine's cores, over the step time), the bytes crossing
sites per step, and the validation loss at equal tokens against synchronous
training. The "## Reading" section, written by hand, is kept when the tables
are regenerated.

usage: two_continents_report.py EMULATION_DIR CONVERGENCE_SUMMARY.json REPORT.md
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emulation_report  # noqa: E402
import low_communication_report as lc  # noqa: E402

NETWORK = "tokyo-london-4"
CALIBRATION = "calibration-whole-model-16-sequences"
RUNS = (  # (file stem, what it is, its convergence case in the summary)
    ("planned-sync", "the planner's synchronous layout, fp32, 1 MiB buckets (the peer)", "sync"),
    ("planned-H20-F5-int4", "a 2-stage pipeline in each site, H = 20", "H20-F5-int4-momentum0.9"),
    ("planned-H20-F5-int4-act8", "the same, activations and their gradients at int8",
     "H20-F5-int4-act8-momentum0.9"),
    ("planned-H40-F5-int4-act8", "the same, H = 40", "H40-F5-int4-act8-momentum0.9"),
    ("planned-1f1b-H20-F5-int4-act8", "the same as H = 20 with int8 activations, 1F1B",
     "H20-F5-int4-act8-momentum0.9"),
)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    run_dir, summary_path, report = sys.argv[1:]
    rows = lc.emulation_rows(run_dir, RUNS, NETWORK)
    device_s = lc.device_compute_s(run_dir, CALIBRATION)
    loss = lc.loss_versus_sync(lc.final_losses(summary_path))
    # The wall-time curves take the GPipe runs (the 1F1B row shares its case).
    measured = {r["case"]: r["summary"]["measured_iteration_s"] for r in rows if r["case"] and "1f1b" not in r["stem"]}
    lines = ["# Two continents, two ranks per site: local steps against issue 17's 85%\n",
             "Regenerate (root, nothing else running): `SECTIONS=two-sites-pp2 bash jobs/emulate/local_steps.sh` "
             "(about 8 minutes on 2 cores), `STEPS=500 LAYOUT=pipelines2x2 SEQUENCES=32 CASES=\"sync "
             "H20-F5-int4-momentum0.9 H20-F5-int4-act8-momentum0.9 H40-F5-int4-act8-momentum0.9\" bash "
             "bench/local_steps.sh runs/bench-2x2-64-500/summary.json` (about 12 minutes), then `python3 "
             "analysis/two_continents_report.py runs/emulate-local-steps runs/bench-2x2-64-500/summary.json "
             "analysis/results/two_continents.md`.\n",
             f"Machine: {emulation_report.machine_facts()}; the emulation of [emulation.md](emulation.md) restricted "
             "to Tokyo and London (210 ms and 18 Mbit/s between them, 100 Mbit/s and 5 ms inside a site, bandwidth "
             "x0.05 as everywhere there), 2 ranks each, `inputs/models/emulation.toml`, 64 sequences of 128 tokens "
             "per step (32 micro-batches of 1 per replica), 40 steps, every run in one session. Local steps: 5 "
             "fragments streamed at int4, DiLoCo's outer momentum 0.9. Peer: the planner's synchronous layout on "
             "the same network, same session.\n",
             "Compute utilisation: forward + backward time over the step time per rank, the warm-up step left out. "
             "Device-time utilisation: what each rank computes per step (16 sequences' worth of the whole model), "
             "timed on one rank alone "
             + (f"({CALIBRATION}: {device_s:.3f} s per step on a device of cores/ranks of a core)" if device_s else "")
             + ", over the step time: 4 ranks share 2 cores, so a rank's own compute time stretches with whatever "
             "else runs at the same moment.\n",
             "Loss: the same settings in `bench/local_steps.sh` (model `tiny`, 500 steps, 4 ranks = 2 stages x 2 "
             "replicas, 64 sequences per step, the same tokens in every case), final validation loss against "
             "synchronous training.\n"]
    lines += lc.two_sites_table(rows, device_s, "validation loss at equal tokens vs synchronous", loss, digits=1)
    capped = lc.emulation_rows(run_dir, RUNS, NETWORK + "-capped")
    if capped:
        capped_device_s = lc.device_compute_s(run_dir, CALIBRATION + "-capped")
        lines += ["", "## Devices of fixed speed\n",
                  lc.fixed_speed_note("SECTIONS=two-sites-pp2-capped bash jobs/emulate/local_steps.sh", 0.45, 4,
                                      CALIBRATION + "-capped", capped_device_s) + "\n"]
        lines += lc.two_sites_table(capped, capped_device_s, "validation loss at equal tokens vs synchronous", loss,
                                    digits=1)
    lines += ["", "## Convergence at equal tokens\n"]
    lines += lc.convergence(summary_path, measured, os.path.join(os.path.dirname(report), "two_continents.png"))
    lc.finish_report(report, lines)


if __name__ == "__main__":
    main()
