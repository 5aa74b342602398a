#!/usr/bin/env python3
"""Local steps (outer.local_steps): the measured sections of
analysis/results/low_communication.md.

- Emulation (jobs/emulate/local_steps.sh): per run, the step time, compute
  utilisation (mean and least over ranks), the bytes crossing sites per step
  from the timing files (pipeline messages to a rank at another site, and
  every exchange's share sent to members at other sites, at the wire size of
  its format), the router's own count of bytes between sites over the whole
  run (start-up and the final gathers included) per step, and the speedups
  over the peers measured in the same session.
- Convergence (bench/local_steps.sh): validation loss at equal tokens per
  case against synchronous training, and the curves against tokens and
  against wall time on the emulated network (each case's steps times the
  emulated step time of its setting, where one was measured); one section
  per summary (LAYOUT=whole8: the whole-model replicas of the pp1 runs).

The sections named in KEPT, if the report already has them, are kept as
they are (the outer-step sweep, the reading, and the simulated section from
bench/local_steps_simulated.sh).

usage: low_communication_report.py EMULATION_DIR CONVERGENCE_SUMMARY.json [MORE_SUMMARIES.json ...] REPORT.md
"""
import glob
import json
import os
import re
import sys
import tomllib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emulation_report  # noqa: E402
import geotrain_timing as gt  # noqa: E402
from requires import pyplot, save_figure  # noqa: E402

SCALAR_BYTES = 64  # the pipeline's norm/loss sums: a few doubles

EMULATED = (  # (file stem, what it is, its convergence case for the wall-time curves)
    # The synchronous curve takes the fastest synchronous run's step time.
    ("planned", "4 stages x 2 replicas, planned, synchronous fp32 (issue 23's baseline)", "sync"),
    ("rank-order", "4 stages x 2 replicas, rank order, synchronous fp32", None),
    ("rank-order-inside-sync", "pipelines inside sites (2 x 4), synchronous fp32, 1 MiB buckets", None),
    ("rank-order-inside-H10", "pipelines inside sites, H = 10, fp32", "H10"),
    ("rank-order-inside-H10-int8", "pipelines inside sites, H = 10, int8", "H10-int8"),
    ("rank-order-inside-H10-F5-int4", "pipelines inside sites, H = 10, 5 fragments streamed, int4", "H10-F5-int4"),
    ("rank-order-inside-H20-int8", "pipelines inside sites, H = 20, int8", "H20-int8"),
    ("rank-order-inside-H20-F5-int4", "pipelines inside sites, H = 20, 5 fragments streamed, int4", None),
    ("rank-order-pp1-H10-int8", "every rank a whole model (8 replicas), H = 10, int8", None),
    ("rank-order-pp1-H10-int8-sites", "the same, a site's 2 replicas summing every step", None),
    ("rank-order-pp1-H20-F5-int4", "every rank a whole model, H = 20, 5 fragments streamed, int4", None),
    ("rank-order-pp1-H20-int8", "every rank a whole model, H = 20, int8", None),
    ("rank-order-pp1-H40-int8", "every rank a whole model, H = 40, int8", None),
    ("rank-order-pp1-mb2-H20-int8", "every rank a whole model, its 2 sequences in one micro-batch, H = 20, int8", None),
    ("rank-order-pp1-mb2-H40-int8", "every rank a whole model, its 2 sequences in one micro-batch, H = 40, int8", None),
    ("planned-H20-int8", "4 stages x 2 replicas, planned, H = 20, int8, outer momentum 0.9", None),
    ("planned-m8-H20-int8all", "4 stages x 2 replicas, planned, 8 micro-batches of 1 sequence, H = 20, int8 "
     "activations, activation gradients and pseudo-gradients, outer momentum 0.9", None),
    ("planned-m8-H20-F5-int4all", "the same, 5 fragments streamed, all at int4", None),
)
# The whole-model replicas' convergence cases (bench/local_steps.sh LAYOUT=whole8, by sequences per
# step) and their emulated runs.
EMULATED_WHOLE = {
    16: {"rank-order-pp1-mb2-H20-int8": "H20-int8", "rank-order-pp1-mb2-H40-int8": "H40-int8"},
    32: {"rank-order-pp1-mb4-H40-int4-long": "H40-int4"},
}
# Pipelines inside sites with 64 sequences per step: their emulated runs, by convergence case
# (bench/local_steps.sh LAYOUT=inside8 SEQUENCES=16).
EMULATED_INSIDE_64 = {"rank-order-inside-s16-H20-int8-long": "H20-int8-momentum0.9",
                      "rank-order-inside-s16-H40-int8-long": "H40-int8-momentum0.9"}
# The planner's 4 x 2 layout with local steps: its emulated runs, by convergence case (bench/local_steps.sh
# LAYOUT=planned8).
EMULATED_PLANNED = {"planned-m8-H20-int8all": "H20-int8all-momentum0.9",
                    "planned-m8-H20-F5-int4all": "H20-F5-int4all-momentum0.9"}
# Issue 17's layout on two continents (jobs/emulate/local_steps.sh's two-sites runs): a 4-stage pipeline
# inside each of Tokyo and London, 64 sequences per step; by convergence case (bench/local_steps.sh
# LAYOUT=pipelines4x2 SEQUENCES=32).
TWO_SITES = (
    ("planned-sync", "4-stage pipeline in each site, synchronous fp32, 1 MiB buckets", "sync"),
    ("planned-H20-F5-int4", "the same pipelines, H = 20", "H20-F5-int4-momentum0.9"),
    ("planned-H40-F5-int4", "the same pipelines, H = 40", "H40-F5-int4-momentum0.9"),
    ("planned-1f1b-H20-F5-int4", "the same pipelines, H = 20, 1F1B", None),
    ("planned-H20-F5-int4-act8", "the same pipelines, H = 20, activations and their gradients at int8",
     "H20-F5-int4-act8-momentum0.9"),
    ("planned-1f1b-H20-F5-int4-act8", "the same pipelines, H = 20, 1F1B and int8 activations",
     "H20-F5-int4-act8-momentum0.9"),
    ("planned-pp2-sites-H20-F5-int4", "2-stage pipelines, a site's 2 summing every step, H = 20", None),
    ("planned-pp1-mb8-sites-H20-F5-int4", "whole models (1 micro-batch of 8), a site's 4 summing every step, H = 20",
     None),
)
# One rank alone training what each rank of those runs trains per step (jobs/emulate/local_steps.sh).
CALIBRATION = "calibration-whole-model-8-sequences"
# Issue 17's utilisation: longer runs (jobs/emulate/local_steps.sh, LONG_STEPS), whole models and
# pipelines inside sites.
LONG = (
    ("rank-order-pp1-mb2-H40-int8-long", 16, "every rank a whole model, 2 sequences in one micro-batch, H = 40, int8"),
    ("rank-order-pp1-mb4-H40-int4-long", 32, "every rank a whole model, 4 sequences in one micro-batch, H = 40, int4"),
    ("rank-order-pp1-mb8-H40-int4-long", 64, "every rank a whole model, 8 sequences in one micro-batch, H = 40, int4"),
    ("rank-order-inside-s16-H20-int8-long", 64,
     "pipelines inside sites (2 x 4), 16 micro-batches of 1 sequence per replica, H = 20, int8, momentum 0.9"),
    ("rank-order-inside-s16-H40-int8-long", 64,
     "pipelines inside sites (2 x 4), 16 micro-batches of 1 sequence per replica, H = 40, int8, momentum 0.9"),
)


def config_value(run, key):
    """The setting as text ("" when absent), as the reports compare it."""
    value = gt.config_value(run, key)
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def tied_bytes(run):
    model_file = config_value(run, "model.file")
    try:
        with open(model_file, "rb") as f:
            model = tomllib.load(f)["model"]
        return 4 * int(model["vocabulary"]) * int(model["hidden"])
    except (OSError, KeyError, ValueError):
        return -1


def cross_site_bytes_per_step(run):
    """Bytes sent to other sites per step, summed over ranks, from the events
    (the warm-up step included: every step exchanges the same)."""
    e = run.events
    sites = run.sites
    devices = run.plan["devices"]  # [stages, replicas]
    ratio = gt.wire_bytes_per_value(config_value(run, "compression.gradients") or "fp32") / 4
    tied_ratio = gt.wire_bytes_per_value(config_value(run, "compression.tied_embedding") or "fp32") / 4
    steps = max(len(set(e["step"].tolist())), 1)
    total = 0.0
    send = e["kind"] == run.kinds["send"]
    for rank, peer, size in zip(e["rank"][send], e["peer"][send], e["bytes"][send]):
        if peer >= 0 and sites[rank] != sites[peer]:
            total += float(size)
    allreduce = e["kind"] == run.kinds["allreduce"]
    tied = tied_bytes(run)
    stage_of = run.plan["stage_of_rank"]
    replica_of = run.plan["replica_of_rank"]
    # outer.sync_within_site: each step's first gradient-sized sum is the
    # site's (its group: the stage's replicas in the rank's site); a second
    # one in the same step is the outer exchange over the whole group.
    within_site = config_value(run, "outer.sync_within_site") == "true"
    seen = set()
    order = np.argsort(e["start"], kind="stable")
    for i in order[allreduce[order]]:
        rank, size, step = int(e["rank"][i]), int(e["bytes"][i]), int(e["step"][i])
        if size <= SCALAR_BYTES:
            continue
        if size == tied and devices.shape[0] > 1:
            ends = devices[[0, -1], replica_of[rank]]
            other = ends[1] if ends[0] == rank else ends[0]
            total += float(size) * tied_ratio if sites[rank] != sites[other] else 0.0
            continue
        group = list(devices[stage_of[rank]])
        if within_site and (rank, step) not in seen:
            seen.add((rank, step))
            group = [v for v in group if sites[v] == sites[rank]]
        d = len(group)
        if d < 2:
            continue
        away = sum(1 for v in group if v != rank and sites[v] != sites[rank]) / (d - 1)
        # Direct exchange: two members swap whole buffers; more send (d-1)/d of it twice.
        sent = float(size) * ratio * (1.0 if d == 2 else 2.0 * (d - 1) / d)
        total += sent * away
    return total / steps


def router_bytes_per_step(traffic_path, steps):
    if not os.path.exists(traffic_path):
        return None
    with open(traffic_path) as f:
        traffic = json.load(f)
    sites, sent = traffic["sites"], traffic["bytes"]
    total = sum(sent[a][b] for a in range(len(sites)) for b in range(len(sites)) if sites[a] != sites[b])
    return total / steps


def emulation_rows(run_dir, entries=EMULATED, network="world-wide"):
    rows = []
    for stem, what, case in entries:
        path = os.path.join(run_dir, f"{network}-{stem}.h5")
        if not os.path.exists(path):
            continue
        run = gt.load(path)
        summary = gt.summarize(run)
        steps = int(run.steps["wall_time"].shape[1])
        rows.append({"stem": stem, "what": what, "case": case, "summary": summary, "steps": steps,
                     "timing_bytes": cross_site_bytes_per_step(run),
                     "router_bytes": router_bytes_per_step(path[:-3] + "-traffic.json", steps)})
    return rows


def emulation_table(rows):
    by = {r["stem"]: r for r in rows}
    base = {k: by[k]["summary"]["measured_iteration_s"] for k in ("planned", "rank-order", "rank-order-inside-sync")
            if k in by}
    sync_bytes = by["rank-order-inside-sync"]["timing_bytes"] if "rank-order-inside-sync" in by else None
    lines = ["| run | s/step | compute utilisation mean (min) | bytes crossing sites / step (timing files) | "
             "less than synchronous inside sites | router: bytes between sites / step (whole run) | "
             "vs planned 4 x 2 | vs rank order 4 x 2 |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        s = r["summary"]
        measured = s["measured_iteration_s"]
        fewer = f"{sync_bytes / r['timing_bytes']:.1f}x" if sync_bytes and r["timing_bytes"] > 0 else ""
        router = f"{r['router_bytes'] / 1e6:.1f} MB" if r["router_bytes"] is not None else "n/a"
        versus = [f"{base[k] / measured:.2f}x" if k in base and measured > 0 else "" for k in ("planned", "rank-order")]
        lines.append(f"| {r['what']} | {measured:.3f} | {100 * s['compute_utilisation_mean']:.0f}% "
                     f"({100 * s['compute_utilisation_min']:.0f}%) | {r['timing_bytes'] / 1e6:.2f} MB | {fewer} | "
                     f"{router} | {versus[0]} | {versus[1]} |")
    return lines


def versus_peers(rows, r, device_s, digits=0):
    """A row's first cells: what, s/step, the speedups over the session's planned and rank-order
    synchronous runs, compute utilisation mean (min) and device-time utilisation."""
    base = {x["stem"]: x["summary"]["measured_iteration_s"] for x in rows if x["stem"] in ("planned", "rank-order")}
    s = r["summary"]
    measured = s["measured_iteration_s"]
    versus = [f"{base[k] / measured:.2f}x" if k in base else "" for k in ("planned", "rank-order")]
    device = f"{100 * device_s / measured:.0f}%" if device_s else "n/a"
    return (f"| {r['what']} | {measured:.3f} | {versus[0]} | {versus[1]} | "
            f"{100 * s['compute_utilisation_mean']:.{digits}f}% ({100 * s['compute_utilisation_min']:.{digits}f}%) | "
            f"{device} |")


def versus_peers_table(rows, device_s, last_column, last_cell, digits=0):
    """versus_peers' columns, then one more: `last_column` its header, last_cell(row) its text."""
    lines = ["| run | s/step | vs planned synchronous | vs rank order | compute utilisation mean (min) | "
             f"device-time utilisation | {last_column} |", "|---|---:|---:|---:|---:|---:|---:|"]
    return lines + [f"{versus_peers(rows, r, device_s, digits)} {last_cell(r)} |" for r in rows]


def device_compute_s(run_dir, calibration=CALIBRATION):
    """The compute of one rank's step on an emulated device: alone on a core it takes t; the ranks
    share the machine's cores, so a device is cores / ranks of one and takes t * ranks / cores.
    A calibration run as a capped device (cpus_per_rank in its .json) took the device's time
    already. t is the fastest of the calibration's repeats (the least disturbed by whatever else ran)."""
    path = os.path.join(run_dir, calibration)
    repeats = sorted(glob.glob(path + "*.h5"))
    if not (repeats and os.path.exists(path + ".json")):
        return None
    with open(path + ".json") as f:
        machine = json.load(f)
    alone = min(gt.summarize(gt.load(h5))["ranks"][0]["compute_per_step_s"] for h5 in repeats)
    if machine.get("cpus_per_rank"):
        return alone
    return alone * machine["ranks"] / machine["cores"]


def two_sites_table(rows, device_s, last_column=None, last_cell=None, digits=0):
    """Runs against the synchronous one of the same session (stem planned-sync); last_column and
    last_cell(row), when given, add one more column."""
    by = {r["stem"]: r for r in rows}
    peer = by.get("planned-sync")
    extra = [last_column] if last_column else []
    lines = ["| " + " | ".join(["run", "s/step", "vs synchronous", "compute utilisation mean (min)",
                                "device-time utilisation", "bytes crossing sites / step (timing files)",
                                "less than synchronous", "router: bytes between sites / step"] + extra) + " |",
             "|---|" + "---:|" * (7 + len(extra))]
    for r in rows:
        s = r["summary"]
        measured = s["measured_iteration_s"]
        fewer = f"{peer['timing_bytes'] / r['timing_bytes']:.1f}x" if peer and r["timing_bytes"] > 0 else ""
        router = f"{r['router_bytes'] / 1e6:.1f} MB" if r["router_bytes"] is not None else "n/a"
        faster = f"{peer['summary']['measured_iteration_s'] / measured:.2f}x" if peer else ""
        device = f"{100 * device_s / measured:.{digits}f}%" if device_s else "n/a"
        cells = [r["what"], f"{measured:.3f}", faster,
                 f"{100 * s['compute_utilisation_mean']:.{digits}f}% ({100 * s['compute_utilisation_min']:.{digits}f}%)",
                 device, f"{r['timing_bytes'] / 1e6:.2f} MB", fewer, router] + ([last_cell(r)] if last_cell else [])
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def long_rows(run_dir):
    rows = []
    for stem, sequences, what in LONG:
        path = os.path.join(run_dir, f"world-wide-{stem}.h5")
        if os.path.exists(path):
            run = gt.load(path)
            wall = run.steps["wall_time"]  # [ranks, steps]
            synchronising = [int(s) for s in run.steps["step"] if int(s) % int(config_value(run, "outer.local_steps")) == 0]
            rows.append({"stem": stem, "sequences": sequences, "what": what, "summary": gt.summarize(run),
                         "steps": int(wall.shape[1]), "syncs": len(synchronising),
                         "inner_s": float(np.median(wall[:, 1:])), "timing_bytes": cross_site_bytes_per_step(run)})
    return rows


def long_table(rows):
    lines = ["| run | sequences per step | steps (outer synchronisations) | s/step | compute utilisation mean (min) | "
             "median step s (an inner step) | bytes crossing sites / step (timing files) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        s = r["summary"]
        lines.append(f"| {r['what']} | {r['sequences']} | {r['steps']} ({r['syncs']}) | {s['measured_iteration_s']:.3f} | "
                     f"{100 * s['compute_utilisation_mean']:.1f}% ({100 * s['compute_utilisation_min']:.1f}%) | "
                     f"{r['inner_s']:.3f} | {r['timing_bytes'] / 1e6:.2f} MB |")
    return lines


def read_metrics(path):
    steps, validation = {}, {}
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r["event"] == "step":
                steps[r["step"]] = r["loss"]
            elif r["event"] == "validation":
                validation[r["step"]] = r["validation_loss"]
    return steps, validation


def convergence(summary_path, emulated, plot_path):
    with open(summary_path) as f:
        summary = json.load(f)
    folder = os.path.dirname(summary_path)
    runs = {c["case"]: read_metrics(os.path.join(folder, c["metrics"])) for c in summary["cases"]}
    sequences_per_step = summary.get("sequences_per_step", 16)
    tokens_per_step = sequences_per_step * 128  # the models here have 128-token sequences
    reference = runs.get("sync")
    lines = [f"Regenerate: `{summary['command']}` ({summary['date']}; {summary['machine']}), then this script. "
             f"Model `{summary['model']}`, {summary['steps']} steps, {summary['ranks']} ranks = "
             f"{summary['stages']} stage{'s' if summary['stages'] > 1 else ''} x {summary['replicas']} replicas, each replica {sequences_per_step // summary['replicas']} "
             "sequences per step, the same tokens in the same order in every case; the validation loss every 50 "
             "steps (right after an outer step for H = 10 and 50 unstreamed). Outer step: learning rate 0.7, Nesterov momentum 0.5 unless the case's name says otherwise (0.5 was the default until the 1000-step runs; the options now name it). Peer: synchronous training (`sync`), "
             "same binary, same script.\n",
             "| case | options | data-parallel exchanges per step | validation loss at each 50 steps | final | vs sync |",
             "|---|---|---:|---|---:|---:|"]
    final_sync = max(reference[1].items())[1] if reference else None
    for c in summary["cases"]:
        _, validation = runs[c["case"]]
        h = re.search(r"local_steps=(\d+)", c["options"])
        per_step = f"1/{h.group(1)}" if h else "1"
        synchronous = re.search(r"synchronous_steps=(\d+)", c["options"])
        if synchronous:
            per_step = f"1 for {synchronous.group(1)} steps, then {per_step}"
        final = max(validation.items())[1]
        versus = f"{100 * (final - final_sync) / final_sync:+.2f}%" if final_sync else ""
        curve = ", ".join(f"{v:.3f}" for _, v in sorted(validation.items()))
        lines.append(f"| {c['case']} | `{c['options'] or 'synchronous'}` | {per_step} | {curve} | {final:.4f} | {versus} |")
    plt = pyplot()
    figure, (by_tokens, by_time) = plt.subplots(1, 2, figsize=(12, 4.5))
    for case, (steps, validation) in runs.items():
        xs = sorted(validation)
        by_tokens.plot([x * tokens_per_step for x in xs], [validation[x] for x in xs], marker="o", label=case)
        step_s = emulated.get(case)
        if step_s:
            by_time.plot([x * step_s for x in xs], [validation[x] for x in xs], marker="o", label=case)
    by_tokens.set_xlabel("tokens")
    by_time.set_xlabel("wall time on the emulated network (s): steps x measured s/step")
    for axis in (by_tokens, by_time):
        axis.set_ylabel("validation loss")
        axis.set_ylim(top=min(4.0, axis.get_ylim()[1]))
        axis.legend()
        axis.grid(alpha=0.3)
    png = plot_path
    save_figure(figure, png)
    lines += ["", f"![validation loss vs tokens and vs emulated wall time]({os.path.basename(png)})", ""]
    return lines


# Sections written by hand (from other commands, or reading the figures),
# kept as they are when the measured ones are regenerated.
KEPT = ("## Outer step settings", "## Reading", "## Simulated at the paper's scale")


def final_losses(summary_path):
    """The final validation loss of every case of a bench/local_steps.sh summary."""
    with open(summary_path) as f:
        summary = json.load(f)
    folder = os.path.dirname(summary_path)
    finals = {}
    for case in summary["cases"]:
        _, validation = read_metrics(os.path.join(folder, case["metrics"]))
        finals[case["case"]] = max(validation.items())[1]
    return finals


def loss_versus_sync(finals):
    """A table cell per run: its case's final loss against the `sync` case's, or empty."""
    sync = finals.get("sync")

    def cell(r):
        return f"{100 * (finals[r['case']] - sync) / sync:+.2f}%" if sync and r["case"] in finals else ""
    return cell


def fixed_speed_note(command, cpus, ranks, calibration, device_s):
    """The paragraph before a table of runs on devices of fixed speed (emulate.py --cpus-per-rank)."""
    return (f"The same runs with every rank a device of fixed speed (`{command}`): `emulate.py --cpus-per-rank "
            f"{cpus:g}` runs each rank in a CPU cgroup capped at {cpus:g} of a core ({ranks} ranks: "
            f"{ranks * cpus:g} cores in all, the emulator the rest), so no rank borrows the core another leaves "
            "idle, as a GPU cannot. Compute utilisation then means what it means on dedicated devices; the "
            "device-time column takes the calibration run under the same cap"
            + (f" ({calibration}: {device_s:.3f} s per step)" if device_s else "") + ".")


def finish_report(report, lines, headings=("## Reading",)):
    """Appends the hand-written sections the report already has, writes it and prints it."""
    lines = lines + kept_sections(report, headings)
    with open(report, "w") as f:
        f.write("\n".join(lines).rstrip() + "\n")
    print("\n".join(lines))


def kept_sections(report, headings=KEPT):
    if not os.path.exists(report):
        return []
    with open(report) as f:
        text = f.read()
    kept = []
    for heading in headings:
        start = text.find(heading)
        if start < 0:
            continue
        end = text.find("\n## ", start + 1)
        kept += [text[start:end if end >= 0 else len(text)].rstrip(), ""]
    return kept


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    run_dir, summary_path, *more_summaries, report = sys.argv[1:]
    rows = emulation_rows(run_dir)
    emulated = {r["case"]: r["summary"]["measured_iteration_s"] for r in rows if r["case"]}
    longer = long_rows(run_dir)
    measured = {r["stem"]: r["summary"]["measured_iteration_s"] for r in rows + longer}
    emulated_whole = {sequences: {case: measured[stem] for stem, case in cases.items() if stem in measured}
                      for sequences, cases in EMULATED_WHOLE.items()}
    if "sync" in emulated:
        emulated_whole[16]["sync"] = emulated["sync"]  # the fastest synchronous run, as above
    emulated_inside = {16: emulated,
                       64: {case: measured[stem] for stem, case in EMULATED_INSIDE_64.items() if stem in measured}}
    two_sites = emulation_rows(run_dir, TWO_SITES, "tokyo-london")
    emulated_planned = {64: {r["case"]: r["summary"]["measured_iteration_s"] for r in two_sites}, 16: {case: measured[stem] for stem, case in EMULATED_PLANNED.items() if stem in measured}}
    if "planned" in measured:
        emulated_planned[16]["sync"] = measured["planned"]  # the same layout, synchronous
    lines = ["# Local steps: data parallelism across sites without an exchange every step\n",
             "## Emulated world-wide network\n",
             "Regenerate (root, nothing else running): `bash jobs/emulate/local_steps.sh` (about 70 minutes on 2 "
             "cores), then `bash bench/local_steps_convergence.sh` (about 90 minutes: every convergence summary "
             "below, then this report).\n",
             f"Machine: {emulation_report.machine_facts()}; the emulation of [emulation.md](emulation.md): 8 ranks "
             "in Oregon, Virginia, Tokyo and London (2 each), bandwidth x0.05, `inputs/models/emulation.toml`, 16 "
             "sequences of 128 tokens per step in every run, all runs in one session. Compute utilisation: forward + "
             "backward time over the step time per rank, the warm-up step left out. Peers: the synchronous runs "
             "in the same session.\n"]
    lines += emulation_table(rows) + [""]
    if longer:
        lines += ["## Compute utilisation over longer runs\n",
                  "The same emulation, whole-model replicas and pipelines inside sites, more sequences per step, "
                  "`LONG_STEPS` steps (the `-long` runs of `jobs/emulate/local_steps.sh`): every outer "
                  "synchronisation (a few seconds on these links) is inside the measured steps, the last one at the "
                  "run's end. Columns as above; the median step is an inner step without a synchronisation.\n"]
        lines += long_table(longer) + [""]
    if two_sites:
        device_s = device_compute_s(run_dir)
        lines += ["## Two continents: a pipeline inside each site, data parallel between them\n",
                  "The same emulation restricted to Tokyo and London (210 ms and 18 Mbit/s between them, 100 "
                  "Mbit/s inside), 4 ranks each, 64 sequences of 128 tokens per step, the planner's placement, 40 "
                  "steps, every run in one session; local steps: 5 fragments streamed at int4, outer momentum 0.9. "
                  "Every layout here has 2 sites' worth of replicas, the number whose loss stays near synchronous "
                  "training (convergence below). Peer: the synchronous run on the same network.\n",
                  "Device-time utilisation: 8 ranks share this machine's cores, so a rank's compute time stretches "
                  "with what else runs (other ranks, and the emulator's packet delay, which costs CPU per byte). "
                  "This column divides instead what each rank computes per step, timed on one rank alone "
                  f"({CALIBRATION}: {device_s:.2f} s per step on a device of cores/ranks of a core), by the step "
                  "time: the share of the machine the training's compute could have had. Where the two columns "
                  "differ, the device-time one is the comparable figure.\n" if device_s else ""]
        lines += two_sites_table(two_sites, device_s) + [""]
    lines += ["## Convergence at equal tokens\n"]
    lines += convergence(summary_path, emulated, os.path.join(os.path.dirname(report), "low_communication.png"))
    for more in more_summaries:
        with open(more) as f:
            layout = json.load(f)
        sequences = layout.get("sequences_per_step", 16)
        name = f"{layout['stages']}x{layout['replicas']}-{sequences}-{layout['steps']}"
        title = (f"{layout['stages']} stage{'s' if layout['stages'] > 1 else ''} x {layout['replicas']} replicas, "
                 f"{sequences} sequences per step, {layout['steps']} steps")
        lines += [f"## Convergence at equal tokens, {title}\n"]
        # Wall-time curves: each layout takes its own emulated runs (2 stages: pipelines inside sites).
        by_stages = {1: emulated_whole, 2: emulated_inside, 4: emulated_planned}
        lines += convergence(more, by_stages.get(layout["stages"], {}).get(sequences, {}),
                             os.path.join(os.path.dirname(report), f"low_communication-{name}.png"))
    finish_report(report, lines, KEPT)


if __name__ == "__main__":
    main()
