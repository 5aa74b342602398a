#!/usr/bin/env python3
"""Bytes that checkpoints send across sites, from jobs/emulate/checkpoint_sites.sh's
runs: per checkpoint form, the timing file's checkpoint events (bytes a rank
sent to a rank of another site while checkpointing) and the emulated router's
bytes between sites over the whole run, less the run without checkpoints
(the same steps, so the same training traffic, give or take the probe's).

usage: checkpoint_sites_report.py RUN_DIR   (prints a markdown table)
"""
import json
import os
import sys

import h5py

FORMS = ["none", "single", "per_site", "parallel"]


def timing_crossing(path):
    """Bytes crossing sites at checkpoints, from a timing file."""
    with h5py.File(path, "r") as f:
        events = f["events"]
        kinds = h5py.check_enum_dtype(events["kind"].dtype)
        kind, rank, peer, sent = (events[k][()] for k in ("kind", "rank", "peer", "bytes"))
        site = [x.decode() if isinstance(x, bytes) else str(x) for x in f["network/site"][()]]
    at = kind == kinds["checkpoint"]
    return sum(int(b) for r, p, b in zip(rank[at], peer[at], sent[at]) if p >= 0 and site[r] != site[p])


def router_crossing(path):
    with open(path) as f:
        traffic = json.load(f)
    sites, sent = traffic["sites"], traffic["bytes"]
    return sum(sent[a][b] for a in range(len(sites)) for b in range(len(sites)) if sites[a] != sites[b])


def main():
    run_dir = sys.argv[1]
    rows = {}
    for form in FORMS:
        stem = os.path.join(run_dir, f"sites-planned-{form}")
        if os.path.exists(stem + ".h5"):
            rows[form] = (timing_crossing(stem + ".h5"), router_crossing(stem + "-traffic.json"))
    if "none" not in rows:
        sys.exit(f"{run_dir}: no run without checkpoints (sites-planned-none.h5)")
    baseline = rows["none"][1]
    print("| checkpoint.form | bytes crossing sites at checkpoints (timing file) | "
          "router: bytes between sites, run less the run without checkpoints |")
    print("|---|---:|---:|")
    for form, (timing, router) in rows.items():
        if form != "none":
            print(f"| {form} | {timing:,} | {router - baseline:,} |")
    print(f"\nRouter baseline (no checkpoints): {baseline:,} bytes between sites over the run.")


if __name__ == "__main__":
    main()
