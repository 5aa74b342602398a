#!/usr/bin/env python3
"""The WAN emulator against the probe: emulate inputs/scenarios/emulation-test.toml
(4 ranks at 2 sites), run `geotrain probe` inside it, and compare every
measured entry with the configured one-way latency and bandwidth of its
pair's sites: every entry within 20 % (the spread per kind of link is
printed). The scenario gives no NIC rate, so the emulator caps each rank's
NIC at its fastest link (0.5 Gbit/s), as geotrain assumes: the probe's
fan-in (1 peer at 0.5 and 2 at 0.2 Gbit/s into one rank) must find each
NIC within 20 % too.

usage: check_probe_accuracy.py GEOTRAIN WORKDIR  (as root)
"""
import os
import subprocess
import sys
import tomllib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from conclude import conclude  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
SCENARIO = os.path.join(REPO, "inputs", "scenarios", "emulation-test.toml")


def main():
    geotrain, workdir = sys.argv[1:3]
    os.makedirs(workdir, exist_ok=True)
    out = os.path.join(workdir, "probed.toml")
    if os.path.exists(out):
        os.remove(out)
    done = subprocess.run([sys.executable, os.path.join(REPO, "jobs", "emulate", "emulate.py"), "run", SCENARIO,
                           "--timeout", "240", "--", os.path.abspath(geotrain), "probe", "--out", out,
                           "--bytes", str(8 << 20), "--repeats", "12"], capture_output=True, text=True, timeout=400)
    print(done.stderr[-3000:])
    if done.returncode != 0 or not os.path.exists(out):
        sys.exit(f"FAILED: the emulated probe exited {done.returncode}\n{done.stdout}")
    with open(SCENARIO, "rb") as f:
        sites = tomllib.load(f)["sites"]
    with open(out, "rb") as f:
        probed = tomllib.load(f)["network"]
    # Ranks at sites the way mpirun maps by node: round-robin.
    site = [r % len(sites["names"]) for r in range(sum(sites["devices"]))]
    failures, spreads = [], {"intra": [], "inter": []}
    n = len(site)
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            kind = "intra" if site[a] == site[b] else "inter"
            want_latency, want_bandwidth = sites[f"{kind}_latency_ms"], sites[f"{kind}_bandwidth_gbps"]
            latency, bandwidth = probed["latency_ms"][a][b], probed["bandwidth_gbps"][a][b]
            error = abs(latency - want_latency) / want_latency
            if error > 0.20:
                failures.append(f"latency {a}->{b}: {latency:.3f} ms, configured {want_latency} ms ({error:.0%} off)")
            ratio = bandwidth / want_bandwidth
            spreads[kind].append(ratio)
            if abs(ratio - 1) > 0.20:
                failures.append(f"bandwidth {a}->{b}: {bandwidth:.3f} Gbit/s, configured {want_bandwidth} ({ratio:.2f}x)")
            print(f"{a}->{b} {kind}: latency {latency:8.3f} ms (configured {want_latency}), "
                  f"bandwidth {bandwidth:.3f} Gbit/s (configured {want_bandwidth}, {ratio:.2f}x)")
    want_nic = max(sites["intra_bandwidth_gbps"], sites["inter_bandwidth_gbps"])
    nics = probed.get("nic_gbps")
    if not isinstance(nics, list) or len(nics) != n:
        failures.append(f"nic_gbps: {nics!r}, not one probed rate per rank")
    else:
        for r, nic in enumerate(nics):
            ratio = nic / want_nic
            print(f"NIC of rank {r}: {nic:.3f} Gbit/s (emulated {want_nic}, {ratio:.2f}x)")
            if abs(ratio - 1) > 0.20:
                failures.append(f"NIC of rank {r}: {nic:.3f} Gbit/s, emulated {want_nic} ({ratio:.2f}x)")
    for kind, ratios in spreads.items():
        ratios.sort()
        median = ratios[len(ratios) // 2]
        print(f"{kind}-site bandwidth: measured / configured from {ratios[0]:.2f} to {ratios[-1]:.2f}, median {median:.2f}")
        if abs(median - 1) > 0.20:
            failures.append(f"{kind}-site bandwidth: median {median:.2f} of the configured rate")
    conclude(failures, "ok: the probe recovers the emulated matrix")


if __name__ == "__main__":
    main()
