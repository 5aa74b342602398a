#!/usr/bin/env python3
"""The hierarchical data-parallel exchange against the flat one on emulated networks
(jobs/emulate/hierarchical_exchange.sh): per run, the measured and predicted step, the compute
utilisation, the bytes the emulated router carried between sites per step (and what the timing
file's send events say ranks sent to other sites), and whether the losses of the two exchanges
agree bit for bit.

usage: hierarchical_exchange_report.py RUN_DIR OUT.md
"""
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import geotrain_timing as gt  # noqa: E402
import h5py  # noqa: E402  (geotrain_timing has checked it is there)

NETWORKS = (("world-wide", "world-wide, pair paths"),
            ("two-continents", "two continents, pair paths"),
            ("world-wide-uplink", "world-wide, site uplinks"),
            ("two-continents-uplink", "two continents, site uplinks"))
SCHEMES = ("direct", "hierarchical", "auto")


def losses(run):
    """Every step's training loss, then the validation losses."""
    with h5py.File(run.path, "r") as f:
        validation = [float(x) for x in f["validation"]["loss"][()]] if "validation" in f else []
    return [float(x) for x in run.steps["loss"]] + validation


def chosen(run):
    """What the run summed by: the timing file's plan text, "data-parallel exchange by stage: ..."."""
    for line in run.plan.get("text", "").splitlines():
        if line.startswith("data-parallel exchange by stage:"):
            return line.split(":", 1)[1].strip()
    return "?"


def main():
    run_dir, out = sys.argv[1:3]
    rows, agreement = [], []
    for network, label in NETWORKS:
        measured = {}
        for scheme in SCHEMES:
            path = os.path.join(run_dir, f"{network}-rank-order-{scheme}.h5")
            if not os.path.exists(path):
                continue
            run = gt.load(path)
            s = gt.summarize(run)
            steps = int(gt.config_value(run, "train.steps", s["recorded_steps"]))
            crossing = gt.router_cross_site_bytes(os.path.join(run_dir, f"{network}-rank-order-{scheme}-traffic.json")) / steps
            per_site = run.ranks / len(set(run.sites))
            measured[scheme] = (s["measured_iteration_s"], crossing, losses(run), chosen(run))
            ran = scheme if scheme != "auto" else f"auto: {chosen(run)}"
            rows.append(f"| {label} | {ran} | {s['measured_iteration_s']:.3f} | {s['predicted_iteration_s']:.3f} | "
                        f"{s['prediction_error']:+.0%} | {s['compute_utilisation_mean']:.1%} | "
                        f"{crossing / 1e6:.1f} | {per_site:.0f} |")
        if "direct" in measured and "hierarchical" in measured:
            (flat_s, flat_bytes, flat_losses, _), (site_s, site_bytes, site_losses, _) = (measured["direct"],
                                                                                           measured["hierarchical"])
            same = all(m[2] == flat_losses for m in measured.values()) and len(flat_losses) > 0
            faster = "hierarchical" if site_s < flat_s else "direct"
            auto = measured.get("auto", (0, 0, [], "not run"))[3]
            agreement.append(f"- {label}: hierarchical sends {flat_bytes / site_bytes:.2f}x fewer bytes between sites "
                             f"per step, its step is {flat_s / site_s:.2f}x the speed of direct's; the faster measured: "
                             f"{faster}, auto chose: {auto}; training and validation losses of all "
                             f"{len(measured)} runs {'identical bit for bit' if same else 'DIFFER'} (step 1 "
                             f"{flat_losses[0]:.6f}, final validation {flat_losses[-1]:.6f}).")
    text = [
        "# The hierarchical data-parallel exchange on emulated networks",
        "",
        "Regenerate (root, ~8 minutes on 2 cores): `bash jobs/emulate/hierarchical_exchange.sh` (10 steps a run; "
        "writes `runs/hierarchical-exchange/`, then `analysis/hierarchical_exchange_report.py "
        "runs/hierarchical-exchange analysis/results/hierarchical_exchange.md`).",
        "",
        f"Machine: {os.cpu_count()} cores, Linux {platform.release()}; every rank in its own network namespace "
        "(`jobs/emulate/emulate.py`: HTB per rank pair, NFQUEUE + `geotrain-netdelay` for latency and the NICs, "
        "each rank's NIC at its fastest link as geotrain assumes), TCP only; the scenario "
        "`inputs/scenarios/world-wide.toml` at bandwidth x0.05.",
        "",
        "Setup: `inputs/models/emulation.toml` (8 layers, hidden 256, ~26 MB of fp32 gradient), 1 stage x 8 "
        "replicas (every rank a replica: the gradient sum is the step's only traffic), one micro-batch of 2 x 128 "
        "tokens per replica, 25 MiB buckets, fp32. `direct`: every member sends a shard to every other "
        "(reduce-scatter, all-gather); `hierarchical`: a site's members reduce-scatter among themselves, the "
        "members holding the same stripe sum it across sites, then spread it inside their site "
        "(`src/job/hierarchical_exchange.cpp`). The peer is the flat `direct` exchange in the same session. "
        "Predicted: the job's own simulator on the emulated matrix with the scheme it ran.",
        "",
        "| network | exchange | measured s/step | predicted s/step | prediction error | compute utilisation | "
        "MB between sites per step (router) | replicas per site |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        *agreement,
        "",
        "**Reading.** The bytes between sites fall by the replicas per site (2 and 4) on every network, as the "
        "design says. Whether that buys time depends on what the sites share. Where every rank pair has its "
        "own WAN path at the pair's rate (the DT-FM scenario as written), the direct exchange already uses all "
        "of those paths at once, and the hierarchical one adds two phases inside each site: it is slower, and "
        "the simulator says so. Where a site's traffic to the others shares one uplink (as a site's WAN "
        "connection does), the hierarchical exchange is 1.7-1.8x faster. `auto` chose the measured-faster "
        "exchange on all four networks from the job's own prediction. Compute utilisation is low in every row "
        "by construction: the model is small and the network slow, so the sum is nearly the whole step.",
        "",
        "The predictions under site uplinks are 35-56% short of the measured step: 8 ranks' TCP flows through "
        "one 50 Mbit/s drop-tail FIFO (1 Gbit/s x0.05) fill it far less than the fluid model's fair shares, "
        "and more so with more flows (direct: 12 and 16 flows out of each site at once, hierarchical: 6 and 4)"
        ". The order of the two schemes, which is what `auto` needs, holds in every case. Left out: "
        "the same at more than 8 ranks (2 cores), and node-level hierarchy inside a site (the runtime sums "
        "by site; a site's nodes are not told apart).",
        "",
    ]
    with open(out, "w") as f:
        f.write("\n".join(text))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
