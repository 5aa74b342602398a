#!/usr/bin/env python3
"""What the default NICs change (analysis/results/network_model.md, "Default
NICs"): `geotrain plan --layout auto` on each shipped scenario that gives no
NIC rates, as geotrain plans it now (each device's NIC at its fastest link,
assumed) and with `nic_gbps = "unlimited"` added (the pair-only model, every
transfer at its pair's full rate at once): the chosen layout, its predicted
step, the exposed data-parallel exchange and the utilisation of each; then
the pair-only model's choice of degrees (tp, pp, dp) planned again with the
NICs assumed: what that choice costs on a network whose NICs are shared.

usage: bench/default_nics.py [GEOTRAIN] [SCENARIO ...] > analysis/results/default_nics.md
"""
import os
import platform
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = ["two-sites-8", "four-sites-16", "regional-mixed", "world-wide-mixed", "geo-a100-nodes"]


def unlimited(text, name):
    """The scenario with nic_gbps = "unlimited" as the first key of its [sites] or [network] table."""
    table = re.search(r"^\[(sites|network)\]\n", text, re.M)
    if not table:
        sys.exit(f"default_nics.py: {name}: no [sites] or [network] table")
    return text[:table.end()] + 'nic_gbps = "unlimited"\n' + text[table.end():]


def plan(geotrain, path, fixed=()):
    done = subprocess.run([geotrain, "plan", "--scenario", path, "--layout", "auto", *fixed], capture_output=True,
                          text=True, timeout=3600)
    if done.returncode != 0:
        sys.exit(f"default_nics.py: {path}: exit {done.returncode}\n{done.stderr}")
    layout = re.search(r"Layout: ((?:tp \d+ x )?pp \d+ x dp \d+ = \d+ of \d+ devices)", done.stdout)
    step = re.search(r"Predicted iteration: ([0-9.]+) s .*DP exchange ([0-9.]+) s, utilisation ([0-9.]+)%", done.stdout)
    links = re.search(r"shared links: (.*)", done.stdout)
    if not layout or not step or not links:
        sys.exit(f"default_nics.py: {path}: no layout, prediction or shared links in:\n{done.stdout}")
    nics = re.match(r"(NICs [0-9.\-]+ Gbit/s|none given|unlimited)", links.group(1))
    return layout.group(1), float(step.group(1)), float(step.group(2)), step.group(3), nics.group(1) if nics else "?"


def main():
    geotrain = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "build", "release", "geotrain")
    names = sys.argv[2:] or SCENARIOS
    print("# What the default NICs change in the plans\n")
    print("Regenerate (~4 minutes on 2 cores): `python3 bench/default_nics.py > analysis/results/default_nics.md`.\n")
    print(f"Machine: {os.cpu_count()} cores, Linux {platform.release()}; simulated (`geotrain plan --layout auto` "
          "on each scenario's own [workload], GPT3-XL unless it names another model).\n")
    print("Where a scenario gives no NIC rate, geotrain now assumes each device's NIC at its fastest link "
          "(what it sends to several peers at once shares that rate); before, every transfer ran at its pair's "
          "full rate however many a device sent (the pair-only model, which `nic_gbps = \"unlimited\"` still "
          "asks for, as the DT-FM paper's own scenarios do). Per scenario: the plan chosen with the NICs "
          "assumed, the plan the pair-only model chooses, and the pair-only choice of degrees (tp, pp, dp) "
          "planned again with the NICs assumed: what that choice costs where a device's transfers share its "
          "NIC. The peer is the pair-only model (the DT-FM cost model's convention) in the same run.\n")
    print("| scenario | NICs | chosen layout | predicted step | DP exchange (exposed) | utilisation |")
    print("|---|---|---|---:|---:|---:|")
    readings = []
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            original = os.path.join(REPO, "inputs", "scenarios", f"{name}.toml")
            text = open(original).read()
            if "nic_gbps" in text:
                sys.exit(f"default_nics.py: {name} gives nic_gbps: nothing is assumed there")
            pair_only = os.path.join(folder, f"{name}.toml")
            with open(pair_only, "w") as f:
                f.write(unlimited(text, name))
            rows = [("assumed: fastest link", plan(geotrain, original)), ("unlimited (pair-only)", plan(geotrain, pair_only))]
            # The pair-only model's choice of degrees, priced with the NICs assumed.
            degrees = dict(re.findall(r"(tp|pp|dp) (\d+)", rows[1][1][0]))
            fixed = [arg for key, value in degrees.items() for arg in (f"--{key}", value)]
            rows.append(("its degrees priced with the assumed NICs", plan(geotrain, original, fixed)))
            for label, (layout, step, exchange, utilisation, nics) in rows:
                shown = f"{nics.replace('NICs ', '')}, {label}" if label.startswith("assumed") else label
                print(f"| {name} | {shown} | {layout} | {step:.3f} s | {exchange:.3f} s | {utilisation}% |", flush=True)
            aware, pair_only, repriced = (row[1] for row in rows)
            readings.append(f"- {name}: the pair-only model's choice ({pair_only[0].split(' =')[0]}) predicted "
                            f"{pair_only[1]:.2f} s; with the NICs assumed it takes {repriced[1]:.2f} s "
                            f"({repriced[1] / pair_only[1]:.2f}x its own prediction), and the plan chosen with "
                            f"them ({aware[0].split(' =')[0]}) {aware[1]:.2f} s: "
                            + ("the same choice." if repriced[1] == aware[1] else
                               f"{repriced[1] / aware[1]:.2f}x faster than the pair-only choice."))
    print("\n**Reading.**\n")
    print("\n".join(readings))


if __name__ == "__main__":
    main()
