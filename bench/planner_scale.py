#!/usr/bin/env python3
"""The layout search at paper scale (analysis/results/planner_scale.md):
`geotrain plan --layout auto` on 5 cloud zones of 4-GPU A100-40GB nodes
(inputs/scenarios/geo-a100-nodes.toml's zones, WAN and NVLink, scaled to
N GPUs, each GPU's NIC at 15 Gbit/s), OPT-350 (inputs/models/opt-350-like.toml),
a global batch of 1,024 sequences; for each N: the plan, its predicted step,
utilisation, and the planner's wall time on this machine.

usage: bench/planner_scale.py [GEOTRAIN] [N ...]   (default: build/release/geotrain 160 400 640 1024 4096)
"""
import os
import re
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = os.path.join(REPO, "inputs", "scenarios", "geo-a100-nodes.toml")


def scenario(n):
    """geo-a100-nodes with n GPUs over its 5 zones (whole nodes), A100-40GB, 15 Gbit/s NICs."""
    per = [(n // 5) - (n // 5) % 4] * 5
    per[0] += n - sum(per)
    text = open(BASE).read()
    for old, new in (("devices = [8, 8, 8, 8, 8]", f"devices = {per}"),
                     ('name = "geo-a100-nodes"', f'name = "geo-a100-{n}"'),
                     ("node_shares_links = true", "node_shares_links = true\nnic_gbps = [15, 15, 15, 15, 15]"),
                     ("A100-80GB", "A100-40GB"), ("memory_gib = 80.0", "memory_gib = 40.0")):
        if old not in text:
            sys.exit(f"planner_scale.py: {BASE} no longer holds {old!r}")
        text = text.replace(old, new)
    return text


def main():
    geotrain = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "build", "release", "geotrain")
    sizes = [int(a) for a in sys.argv[2:]] or [160, 400, 640, 1024, 4096]
    print("| GPUs | plan (tp x pp x dp, devices used) | predicted step | DP exchange (exposed) | scheme (auto, by stage) "
          "| utilisation | planner wall time |")
    print("|---:|---|---:|---:|---|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for n in sizes:
            path = os.path.join(folder, f"geo-a100-{n}.toml")
            with open(path, "w") as f:
                f.write(scenario(n))
            started = time.monotonic()
            done = subprocess.run([geotrain, "plan", "--scenario", path, "--model",
                                   os.path.join(REPO, "inputs", "models", "opt-350-like.toml"), "--batch", "1024",
                                   "--layout", "auto"], capture_output=True, text=True, timeout=3600)
            wall = time.monotonic() - started
            if done.returncode != 0:
                sys.exit(f"planner_scale.py: {n} GPUs: exit {done.returncode}\n{done.stderr}")
            layout = re.search(r"Layout: ((?:tp \d+ x )?pp \d+ x dp \d+ = \d+ of \d+ devices)", done.stdout)
            step = re.search(r"Predicted iteration: ([0-9.]+) s .*DP exchange ([0-9.]+) s, utilisation ([0-9.]+)%",
                             done.stdout)
            scheme = re.search(r"DP auto \(by stage: ([a-z ]+)\)", done.stdout)
            if not layout or not step or not scheme:
                sys.exit(f"planner_scale.py: {n} GPUs: no layout or prediction in:\n{done.stdout}")
            print(f"| {n} | {layout.group(1)} | {float(step.group(1)):.3f} s | {float(step.group(2)):.3f} s "
                  f"| {scheme.group(1)} | {step.group(3)}% | {wall:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
