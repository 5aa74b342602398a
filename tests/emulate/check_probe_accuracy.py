#!/usr/bin/env python3
"""The WAN emulator against the probe: emulate inputs/scenarios/emulation-test.toml
(4 ranks at 2 sites), run `geotrain probe` inside it, and compare every
measured entry with the configured one-way latency and bandwidth of its
pair's sites: every entry within 20 % (the spread per kind of link is
printed). The scenario gives no NIC rate, so the emulator caps each rank's
NIC at its fastest link (0.5 Gbit/s), as geotrain assumes: the probe's
fan-in (1 peer at 0.5 and 2 at 0.2 Gbit/s into one rank) must find each
NIC within 20 % too. The probe must find the two sites from the latencies
(ranks round-robin, as mpirun maps by node) and, with no uplink emulated,
write none.

Then the same with each site's uplink emulated at 0.3 Gbit/s: a site's two
ranks sending to the other site's two at once (0.4 Gbit/s of pair rates)
take 0.4 / 0.3 = 1.33x the time of one alone; the probe must write each
site's uplink within 20 % of 0.3. (Not its NICs: a fan-in's two far peers
are now held by the uplink, below what the NIC would allow them, so the
fan-in cannot see the NIC; the probe writes what it saw carried.)

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


def probe(geotrain, workdir, scenario_text, name, repeats):
    """The network geotrain probe writes inside the emulation of `scenario_text`."""
    scenario = os.path.join(workdir, f"{name}.toml")
    with open(scenario, "w") as f:
        f.write(scenario_text)
    out = os.path.join(workdir, f"{name}-probed.toml")
    if os.path.exists(out):
        os.remove(out)
    done = subprocess.run([sys.executable, os.path.join(REPO, "jobs", "emulate", "emulate.py"), "run", scenario,
                           "--timeout", "240", "--", os.path.abspath(geotrain), "probe", "--out", out,
                           "--bytes", str(8 << 20), "--repeats", str(repeats)], capture_output=True, text=True, timeout=400)
    print(done.stderr[-3000:])
    print(done.stdout[-2000:])
    if done.returncode != 0 or not os.path.exists(out):
        sys.exit(f"FAILED: the emulated probe ({name}) exited {done.returncode}\n{done.stdout}")
    with open(out, "rb") as f:
        return tomllib.load(f)["network"]


def check_matrix(probed, sites, site, failures):
    spreads = {"intra": [], "inter": []}
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
    for kind, ratios in spreads.items():
        ratios.sort()
        median = ratios[len(ratios) // 2]
        print(f"{kind}-site bandwidth: measured / configured from {ratios[0]:.2f} to {ratios[-1]:.2f}, median {median:.2f}")
        if abs(median - 1) > 0.20:
            failures.append(f"{kind}-site bandwidth: median {median:.2f} of the configured rate")


def check_nics(probed, want_nic, tolerance, n, what, failures):
    nics = probed.get("nic_gbps")
    if not isinstance(nics, list) or len(nics) != n:
        failures.append(f"{what}: nic_gbps {nics!r}, not one probed rate per rank")
        return
    for r, nic in enumerate(nics):
        ratio = nic / want_nic
        print(f"{what}: NIC of rank {r}: {nic:.3f} Gbit/s (emulated {want_nic}, {ratio:.2f}x)")
        if abs(ratio - 1) > tolerance:
            failures.append(f"{what}: NIC of rank {r}: {nic:.3f} Gbit/s, emulated {want_nic} ({ratio:.2f}x)")


def check_sites(probed, site, want_uplink, what, failures):
    """The probed sites group the ranks as `site` does; uplinks as wanted (None: none written)."""
    names = probed.get("sites", [])
    if len(names) != len(site) or any((names[a] == names[b]) != (site[a] == site[b])
                                      for a in range(len(site)) for b in range(len(site))):
        failures.append(f"{what}: probed sites {names}, not the emulated grouping {site}")
    uplinks = probed.get("uplink_gbps")
    print(f"{what}: sites {names}, uplink_gbps {uplinks}")
    if want_uplink is None:
        if uplinks is not None:
            failures.append(f"{what}: uplink_gbps {uplinks} written where none is emulated")
    elif not isinstance(uplinks, list) or len(uplinks) != len(set(site)):
        failures.append(f"{what}: uplink_gbps {uplinks!r}, not one per site")
    else:
        for k, uplink in enumerate(uplinks):
            if abs(uplink / want_uplink - 1) > 0.20:
                failures.append(f"{what}: uplink of site {k}: {uplink:.3f} Gbit/s, emulated {want_uplink}")


def main():
    geotrain, workdir = sys.argv[1:3]
    os.makedirs(workdir, exist_ok=True)
    with open(SCENARIO) as f:
        text = f.read()
    sites = tomllib.loads(text)["sites"]
    # Ranks at sites the way mpirun maps by node: round-robin.
    site = [r % len(sites["names"]) for r in range(sum(sites["devices"]))]
    want_nic = max(sites["intra_bandwidth_gbps"], sites["inter_bandwidth_gbps"])
    failures = []
    probed = probe(geotrain, workdir, text, "plain", 12)
    check_matrix(probed, sites, site, failures)
    check_nics(probed, want_nic, 0.20, len(site), "no uplink", failures)
    check_sites(probed, site, None, "no uplink", failures)
    if "inter_bandwidth_gbps = 0.2\n" not in text:
        sys.exit(f"FAILED: {SCENARIO} no longer has inter_bandwidth_gbps = 0.2")
    uplinked = probe(geotrain, workdir, text.replace("inter_bandwidth_gbps = 0.2\n",
                                                     "inter_bandwidth_gbps = 0.2\nuplink_gbps = 0.3\n"), "uplink", 3)
    check_sites(uplinked, site, 0.3, "uplink 0.3", failures)
    conclude(failures, "ok: the probe recovers the emulated matrix, its sites and their uplinks")


if __name__ == "__main__":
    main()
