#!/usr/bin/env python3
"""WAN emulation on one machine (root): every rank gets a network namespace
(a machine of its site) behind a router namespace; every pair of ranks gets
its sites' one-way latency and bandwidth from the scenario (inside a site:
the scenario's diagonal), each pair on its own shaped path as the planner's
model assumes; an MPI command runs with one orted per rank namespace, TCP
only. Everything is torn down afterwards, also on failure or Ctrl-C.

  emulate.py run SCENARIO.toml [--sites A,B,..] [--devices 2,2,..] [--bandwidth-scale F]
                [--latency-scale F] [--matrix-out FILE] [--timeout S] -- COMMAND...
  emulate.py up SCENARIO.toml ... / emulate.py down
  emulate.py cut A B / emulate.py heal A B   (while a network is up or a run is on)
  emulate.py device --cpus-per-rank F -- COMMAND...   (one device, no network)

cut drops every packet between ranks A and B, both ways (a 100%-loss link
failure: the two ranks stay alive, everything else still flows); heal
restores the link.

--cpus-per-rank F makes every rank a device of fixed speed: its processes
run in a CPU cgroup capped at F of one core (CFS quota; the rank may run on
any core, mpirun binds it as usual), so a rank cannot
borrow the cores its idle neighbours leave, as a GPU cannot. Keep F x ranks
below the machine's cores: the emulator's packet delay and the kernel's
networking need the rest. `device` runs COMMAND alone under the same cap,
on core 0 (the calibration of a device). --device-gflops G (run, device)
makes every rank a device of G GFLOPS at the calibration model's shapes
instead, the same device on every machine: the share of a core comes from
training --calibration-model alone on core 0, uncapped and then capped
(docs/emulation.md); --device-out writes the device as JSON.

--matrix-out writes the emulated network at rank level in the scenario
format (what a perfect probe would measure), for `network.matrix`.

COMMAND is what mpirun runs on every rank (e.g. build/release/geotrain train
CONFIG ...); this script adds mpirun and its options. Ranks are mapped to
sites the way mpirun's default by-node mapping does: rank r in site
r mod (sites), round-robin over the sites with free slots.

Topology: namespaces gt-r (router), gt-c (control: mpirun, undelayed) and
gt-d0, gt-d1, ... (one per rank, host name <site>-<rank>), each on its own
/24 of 10.213.0.0/16 with a veth to the router. Bandwidth: HTB on the
router's link toward each rank, one class per source rank (u32 on the
source subnet), a default unshaped class for control traffic. Latency: `tc netem` where the kernel has it, else
iptables NFQUEUE rules per site pair in the router and geotrain-netdelay
holding each packet for its pair's delay. Shared links ([sites] nic_gbps,
uplink_gbps; without nic_gbps each rank's NIC is its fastest link, as geotrain
assumes, and nic_gbps = "unlimited" leaves NICs out): geotrain-netdelay sends every packet through the FIFO links it
crosses (its ranks' NICs, its sites' uplinks, each direction) before its
delay, dropping what would wait more than 50 ms, so transfers at once share
them as the planner's flow model says (tests/emulate/check_shared_links.py).
"""
import argparse
import json
import re
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib

PREFIX = "10.213"
ROUTER, CONTROL = "gt-r", "gt-c"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NETDELAY = os.environ.get("GEOTRAIN_NETDELAY", os.path.join(REPO, "build", "release", "geotrain-netdelay"))


class EmulationError(Exception):
    pass


def sh(*args, check=True, quiet=False):
    done = subprocess.run(args, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise EmulationError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


def in_ns(ns, *args, check=True):
    return sh("ip", "netns", "exec", ns, *args, check=check)


def rank_ns(r):
    return f"gt-d{r}"


# ---- the scenario, reduced to sites

def load_sites(path, chosen, devices):
    """Site names, ranks per site, one-way latency [s][s] in ms, bandwidth
    [s][s] in Gbit/s and the shared links ({"nic_gbps": per site, "uplink_gbps":
    per site}, each only when given) from a site-form scenario, restricted to
    `chosen` sites (default: all) with `devices` ranks each (default: the file's)."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise EmulationError(f"{path}: {error}")
    sites = data.get("sites")
    if not isinstance(sites, dict) or "names" not in sites:
        raise EmulationError(f"{path}: [sites] names: missing (the emulator needs a site-form scenario)")
    names = list(sites["names"])
    n = len(names)
    if "latency_ms" in sites:
        latency = [list(map(float, row)) for row in sites["latency_ms"]]
        bandwidth = [list(map(float, row)) for row in sites["bandwidth_gbps"]]
    else:
        # Scalars inside / between sites, then [[sites.link]] pairs (both ways).
        inter_l, inter_b = sites.get("inter_latency_ms"), sites.get("inter_bandwidth_gbps")
        latency = [[float(sites["intra_latency_ms"]) if i == j else inter_l for j in range(n)] for i in range(n)]
        bandwidth = [[float(sites["intra_bandwidth_gbps"]) if i == j else inter_b for j in range(n)] for i in range(n)]
        for link in sites.get("link", []):
            a, b = (names.index(x) for x in link["between"])
            latency[a][b] = latency[b][a] = float(link["latency_ms"])
            bandwidth[a][b] = bandwidth[b][a] = float(link["bandwidth_gbps"])
        if any(x is None for row in latency + bandwidth for x in row):
            raise EmulationError(f"{path}: [sites]: a pair of sites has no link (inter_* or [[sites.link]])")
        latency = [[float(x) for x in row] for row in latency]
        bandwidth = [[float(x) for x in row] for row in bandwidth]
    for field, matrix in (("latency_ms", latency), ("bandwidth_gbps", bandwidth)):
        if len(matrix) != n or any(len(row) != n for row in matrix):
            raise EmulationError(f"{path}: [sites] {field}: must be {n} x {n}")
    index = list(range(n))
    if chosen:
        missing = [c for c in chosen if c not in names]
        if missing:
            raise EmulationError(f"{path}: [sites] names: no site {missing[0]!r} (have {', '.join(names)})")
        index = [names.index(c) for c in chosen]
    counts = devices or [int(sites["devices"][i]) for i in index]
    if len(counts) != len(index) or min(counts) < 1:
        raise EmulationError(f"--devices: one count >= 1 per site ({len(index)} sites)")
    for i in index:
        for j in index:
            if i != j and (latency[i][j] < 0 or bandwidth[i][j] <= 0):
                raise EmulationError(f"{path}: [sites] {names[i]} -> {names[j]}: latency must be >= 0 and bandwidth > 0")
    shared = {key: per_site_rates(path, sites, key, n) for key in ("nic_gbps", "uplink_gbps")}
    shared = {key: [rates[i] for i in index] for key, rates in shared.items() if rates is not None}
    bandwidth = [[bandwidth[i][j] for j in index] for i in index]
    if sites.get("nic_gbps") is None and sum(counts) > 1:
        shared["nic_gbps"] = fastest_links(bandwidth, counts)
    return [names[i] for i in index], counts, [[latency[i][j] for j in index] for i in index], bandwidth, shared


def fastest_links(bandwidth, counts):
    """The NIC geotrain assumes where a scenario gives none (plan::nics_at_fastest_link):
    per site, a rank's fastest link to or from any other rank."""
    k = len(counts)
    return [max([bandwidth[s][t] for t in range(k) if t != s] + [bandwidth[t][s] for t in range(k) if t != s] +
                ([bandwidth[s][s]] if counts[s] > 1 else []), default=None) for s in range(k)]


def per_site_rates(path, sites, key, n):
    """[sites] nic_gbps / uplink_gbps: one number for every site or one per site (None when absent,
    and for nic_gbps = "unlimited", the pair-only model)."""
    value = sites.get(key)
    if value is None or (key == "nic_gbps" and value == "unlimited"):
        return None
    rates = [value] * n if isinstance(value, (int, float)) else value
    if not isinstance(rates, list) or len(rates) != n or not all(isinstance(x, (int, float)) and x > 0 for x in rates):
        raise EmulationError(f"{path}: [sites] {key}: one number > 0, or one per site ({n})")
    return [float(x) for x in rates]


def rank_sites(counts):
    """mpirun --map-by node: round-robin over the sites that still have slots."""
    free, order = list(counts), []
    while any(free):
        for s in range(len(free)):
            if free[s]:
                order.append(s)
                free[s] -= 1
    return order


def write_matrix(path, scenario, names, counts, latency_ms, bandwidth_gbps, shared):
    site = rank_sites(counts)
    n = len(site)
    rows = lambda m: "".join(f"  [{', '.join(repr(float(m[site[a]][site[b]]) if a != b else 0.0) for b in range(n))}],\n"
                             for a in range(n))
    with open(path, "w") as f:
        f.write(f"# The emulated network of {os.path.basename(scenario)} at rank level (emulate.py --matrix-out):\n"
                f"# sites {', '.join(names)}, ranks per site {counts}, ranks mapped round-robin over the sites.\n\n"
                f"[scenario]\nname = \"emulated-{os.path.splitext(os.path.basename(scenario))[0]}-{n}\"\n"
                f"description = \"{n} ranks, emulated\"\nsource = \"jobs/emulate/emulate.py\"\n\n"
                f"[network]\nlatency_ms = [\n{rows(latency_ms)}]\nbandwidth_gbps = [\n{rows(bandwidth_gbps)}]\n"
                f"sites = [{', '.join(repr(names[s]).replace(chr(39), chr(34)) for s in site)}]\n")
        if "nic_gbps" in shared:
            f.write(f"nic_gbps = [{', '.join(repr(shared['nic_gbps'][s]) for s in site)}]\n")
        else:
            f.write('nic_gbps = "unlimited"\n')
        if "uplink_gbps" in shared:  # sites in the order they first appear above
            order = list(dict.fromkeys(site))
            f.write(f"uplink_gbps = [{', '.join(repr(shared['uplink_gbps'][s]) for s in order)}]\n")


# ---- the network

def have_netem():
    sh("ip", "netns", "add", "gt-probe")
    try:
        sh("ip", "-n", "gt-probe", "link", "add", "gt-d0", "type", "veth", "peer", "name", "gt-d1")
        return in_ns("gt-probe", "tc", "qdisc", "add", "dev", "gt-d0", "root", "netem", "delay", "1ms",
                     check=False).returncode == 0
    finally:
        sh("ip", "netns", "del", "gt-probe", check=False)


def write_name_files(namespaces, hosts):
    """`ip netns exec` mounts /etc/netns/<ns>/* over /etc: every namespace
    resolves the emulation's names locally, and no DNS server (unreachable
    from inside) stalls the daemons' host name lookups."""
    for ns in namespaces:
        folder = os.path.join("/etc/netns", ns)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "hosts"), "w") as f:
            f.write("127.0.0.1 localhost\n" + "".join(f"{address} {' '.join(names)}\n" for address, names in hosts))
        with open(os.path.join(folder, "resolv.conf"), "w") as f:
            f.write("# geotrain emulation: names from hosts only\noptions timeout:1 attempts:1\n")


def down():
    """Removes every namespace and process of an emulation (idempotent)."""
    sh("pkill", "-f", "geotrain-netdelay", check=False)
    if os.path.isdir("/etc/netns"):
        for name in os.listdir("/etc/netns"):
            if name.startswith("gt-"):
                shutil.rmtree(os.path.join("/etc/netns", name), ignore_errors=True)
    listing = sh("ip", "netns", "list", check=False).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith("gt-"):
            for pid in sh("ip", "netns", "pids", name, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", name, check=False)


def shared_links(site, shared):
    """geotrain-netdelay's --link arguments and, per (a, b) rank pair, the
    links it crosses: a's NIC sending, b's NIC receiving, and between sites
    the sending site's uplink out and the receiving site's uplink in."""
    n, sites = len(site), max(site) + 1
    links, crossed = [], {}
    if "nic_gbps" in shared:
        for r in range(n):
            rate = shared["nic_gbps"][site[r]] * 1e9
            links += [("--link", f"{r}:{rate:.0f}"), ("--link", f"{n + r}:{rate:.0f}")]
    if "uplink_gbps" in shared:
        for s in range(sites):
            rate = shared["uplink_gbps"][s] * 1e9
            links += [("--link", f"{2 * n + s}:{rate:.0f}"), ("--link", f"{2 * n + sites + s}:{rate:.0f}")]
    for a in range(n):
        for b in range(n):
            ids = [a, n + b] if "nic_gbps" in shared else []
            if "uplink_gbps" in shared and site[a] != site[b]:
                ids += [2 * n + site[a], 2 * n + sites + site[b]]
            crossed[a, b] = ids
    return [arg for pair in links for arg in pair], crossed


def up(names, counts, latency_ms, bandwidth_gbps, log, mtu=1500, shared=None):
    """Builds the namespaces, links, shaping and delays; returns the delay
    process (None with netem). Rank r sits in site rank_sites(counts)[r].
    Shared links (NICs, site uplinks) are geotrain-netdelay's, also where the
    kernel has netem: every pair's packets then go through it."""
    shared = shared or {}
    down()
    site = rank_sites(counts)
    n = len(site)
    hosts = [(f"{PREFIX}.250.2", ["gt-c"])] + \
            [(f"{PREFIX}.{r + 1}.2", [rank_ns(r), f"{names[site[r]]}-{r}"]) for r in range(n)]
    write_name_files((ROUTER, CONTROL, *[rank_ns(r) for r in range(n)]), hosts)
    for ns in (ROUTER, CONTROL, *[rank_ns(r) for r in range(n)]):
        sh("ip", "netns", "add", ns)
        in_ns(ns, "ip", "link", "set", "lo", "up")
    in_ns(ROUTER, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
    links = [(CONTROL, "gt-ce", "gt-rc", 250)] + [(rank_ns(r), f"gt-d{r}e", f"gt-r{r}", r + 1) for r in range(n)]
    for ns, inside, outside, subnet in links:
        sh("ip", "link", "add", inside, "netns", ns, "type", "veth", "peer", "name", outside, "netns", ROUTER)
        in_ns(ns, "ip", "link", "set", inside, "mtu", str(mtu))
        in_ns(ROUTER, "ip", "link", "set", outside, "mtu", str(mtu))
        in_ns(ns, "ip", "addr", "add", f"{PREFIX}.{subnet}.2/24", "dev", inside)
        in_ns(ns, "ip", "link", "set", inside, "up")
        in_ns(ns, "ip", "route", "add", "default", "via", f"{PREFIX}.{subnet}.1")
        in_ns(ROUTER, "ip", "addr", "add", f"{PREFIX}.{subnet}.1/24", "dev", outside)
        in_ns(ROUTER, "ip", "link", "set", outside, "up")
        # Windows for long fat pipes (bandwidth x RTT), and no slow start
        # after the pauses between training steps.
        in_ns(ns, "sysctl", "-q", "-w", "net.ipv4.tcp_slow_start_after_idle=0")
        in_ns(ns, "sysctl", "-q", "-w", "net.ipv4.tcp_rmem=4096 131072 67108864")
        in_ns(ns, "sysctl", "-q", "-w", "net.ipv4.tcp_wmem=4096 131072 67108864")
    netem = have_netem() and not shared
    link_args, crossed = shared_links(site, shared)
    queues = []
    for b in range(n):  # traffic toward rank b leaves the router on gt-r{b}
        dev = f"gt-r{b}"
        in_ns(ROUTER, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "999")
        in_ns(ROUTER, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:999", "htb", "rate", "20gbit")
        for a in range(n):
            if a == b:
                continue
            delay_ms = latency_ms[site[a]][site[b]]
            rate_kbit = max(8, round(bandwidth_gbps[site[a]][site[b]] * 1e6))
            classid = f"1:{10 + a}"
            in_ns(ROUTER, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", classid, "htb",
                  "rate", f"{rate_kbit}kbit", "ceil", f"{rate_kbit}kbit")
            source = ["match", "ip", "src", f"{PREFIX}.{a + 1}.0/24"]
            if netem:
                in_ns(ROUTER, "tc", "qdisc", "add", "dev", dev, "parent", classid, "handle", f"{10 + a}:",
                      "netem", "delay", f"{delay_ms}ms", "limit", "100000")
                in_ns(ROUTER, "tc", "filter", "add", "dev", dev, "protocol", "ip", "parent", "1:", "prio", "2",
                      "u32", *source, "flowid", classid)
            else:
                # Pure acknowledgements (IP length under 128 bytes, TCP flags
                # ACK alone, no options in the IP header) in a class of their
                # own that goes first, so that they do not wait behind seconds
                # of the other direction's queued data when both ends send at
                # once (a data-parallel swap): that stalls TCP's window. Data,
                # however small, keeps its place. Both share the pair's rate.
                small, bulk = f"1:{2000 + a}", f"1:{3000 + a}"
                small_kbit = max(8, rate_kbit // 20)  # 5%, more than acknowledgements need
                for leaf, rate, prio in ((small, small_kbit, "0"), (bulk, max(8, rate_kbit - small_kbit), "1")):
                    in_ns(ROUTER, "tc", "class", "add", "dev", dev, "parent", classid, "classid", leaf, "htb",
                          "rate", f"{rate}kbit", "ceil", f"{rate_kbit}kbit", "prio", prio)
                    in_ns(ROUTER, "tc", "qdisc", "add", "dev", dev, "parent", leaf, "pfifo", "limit", "10000")
                in_ns(ROUTER, "tc", "filter", "add", "dev", dev, "protocol", "ip", "parent", "1:", "prio", "1",
                      "u32", *source, "match", "ip", "protocol", "6", "0xff", "match", "u8", "0x05", "0x0f", "at", "0",
                      "match", "u16", "0x0000", "0xff80", "at", "2", "match", "u8", "0x10", "0xff", "at", "33",
                      "flowid", small)
                in_ns(ROUTER, "tc", "filter", "add", "dev", dev, "protocol", "ip", "parent", "1:", "prio", "2",
                      "u32", *source, "flowid", bulk)
            if not netem and (delay_ms > 0 or crossed[a, b]):
                q = a * n + b
                pair = ["-s", f"{PREFIX}.{a + 1}.0/24", "-d", f"{PREFIX}.{b + 1}.0/24"]
                if crossed[a, b]:
                    # Pure acknowledgements (the ACK flag alone, under 128 bytes) in a queue of their own that
                    # shares no link, as the pair classes give them a class that goes first: behind the other
                    # direction's queued data they would stall TCP's window.
                    queues.append(f"{n * n + q}:{delay_ms}")
                    in_ns(ROUTER, "iptables-legacy", "-A", "FORWARD", *pair, "-p", "tcp", "--tcp-flags", "ALL", "ACK",
                          "-m", "length", "--length", "0:127", "-j", "NFQUEUE", "--queue-num", str(n * n + q))
                queues.append(f"{q}:{delay_ms}" + (":" + ",".join(map(str, crossed[a, b])) if crossed[a, b] else ""))
                in_ns(ROUTER, "iptables-legacy", "-A", "FORWARD", *pair, "-j", "NFQUEUE", "--queue-num", str(q))
    print(f"emulate: {n} ranks at {len(names)} sites ({', '.join(names)}), latency by "
          f"{'netem' if netem else 'geotrain-netdelay'}"
          + "".join(f", {key.replace('_gbps', '')}s {'/'.join(f'{x:g}' for x in rates)} Gbit/s"
                    for key, rates in shared.items()), file=log, flush=True)
    if netem or not queues:
        return None
    if not os.access(NETDELAY, os.X_OK):
        raise EmulationError(f"{NETDELAY}: not built (libnetfilter-queue-dev, then cmake --build --preset release)")
    delay = subprocess.Popen(["ip", "netns", "exec", ROUTER, NETDELAY, *link_args, *queues], stdout=subprocess.PIPE,
                             stderr=sys.stderr, text=True)
    if delay.stdout.readline().strip() != "ready":
        raise EmulationError("geotrain-netdelay did not start")
    return delay


def traffic(names, counts):
    """Bytes the router forwarded from rank a to rank b over the run (the
    pair's shaping class counts everything it sent), with the ranks' sites."""
    site = rank_sites(counts)
    n = len(site)
    sent = [[0] * n for _ in range(n)]
    for b in range(n):
        listing = in_ns(ROUTER, "tc", "-s", "class", "show", "dev", f"gt-r{b}").stdout
        for match in re.finditer(r"class htb 1:(\d+) .*?\n\s*Sent (\d+) bytes", listing):
            a = int(match.group(1)) - 10
            if 0 <= a < n and a != b:
                sent[a][b] = int(match.group(2))
    return {"sites": [names[s] for s in site], "bytes": sent}


def cut(a, b, on):
    """Inserts (on) or deletes DROP rules for the pair ahead of the delay rules."""
    listing = sh("ip", "netns", "list", check=False).stdout.split()
    for ns in (ROUTER, rank_ns(a), rank_ns(b)):
        if ns not in listing:
            raise EmulationError(f"namespace {ns} does not exist: no emulated rank {a} and {b} is up")
    for source, destination in ((a, b), (b, a)):
        rule = ["FORWARD", "-s", f"{PREFIX}.{source + 1}.0/24", "-d", f"{PREFIX}.{destination + 1}.0/24", "-j", "DROP"]
        present = in_ns(ROUTER, "iptables-legacy", "-C", *rule, check=False).returncode == 0
        if on and not present:
            in_ns(ROUTER, "iptables-legacy", "-I", rule[0], "1", *rule[1:])
        elif not on and present:
            in_ns(ROUTER, "iptables-legacy", "-D", *rule)


# ---- devices of fixed speed (CPU cgroups)

CGROUP_V1, CGROUP_V2 = "/sys/fs/cgroup/cpu", "/sys/fs/cgroup"
GROUP = "geotrain-emulate"


def cap_period_us(cpus):
    """CFS periods of 2 ms where the quota allows (>= 1 ms): a rank that has spent its quota waits
    at most the rest of one period, which short periods keep small next to a step."""
    return max(2000, -(-1000 * 1000 // int(cpus * 1000)))


def capped_groups(names, cpus):
    """One cgroup per name capped at `cpus` of a core; returns {name: its cgroup.procs path} and the
    `mount` arguments of its hierarchy (for a mount namespace that lacks it)."""
    period = cap_period_us(cpus)
    quota = int(cpus * period)
    if os.path.exists(os.path.join(CGROUP_V1, "cpu.cfs_quota_us")):
        base = os.path.join(CGROUP_V1, GROUP)
        limits = {"cpu.cfs_period_us": str(period), "cpu.cfs_quota_us": str(quota)}
        mount = "-t cgroup -o cpu none"
    elif "cpu" in open_text(os.path.join(CGROUP_V2, "cgroup.controllers")).split():
        base = os.path.join(CGROUP_V2, GROUP)
        limits = {"cpu.max": f"{quota} {period}"}
        mount = "-t cgroup2 none"
    else:
        raise EmulationError("--cpus-per-rank needs the cgroup cpu controller (cgroup v1 cpu or v2 with cpu "
                             "enabled); none is mounted here")
    try:
        os.makedirs(base, exist_ok=True)
        if mount == "-t cgroup2 none":  # the cpu controller must be enabled down to the groups' parent
            for parent in (CGROUP_V2, base):
                write_text(os.path.join(parent, "cgroup.subtree_control"), "+cpu")
        procs = {}
        for name in names:
            group = os.path.join(base, name)
            os.makedirs(group, exist_ok=True)
            for file, value in limits.items():
                write_text(os.path.join(group, file), value)
            procs[name] = os.path.join(group, "cgroup.procs")
        return procs, mount
    except OSError as error:
        raise EmulationError(f"--cpus-per-rank: cannot set up the CPU cgroups under {base}: {error}") from error


def remove_capped_groups():
    """Removes the cgroups of capped_groups once their processes are gone (idempotent)."""
    for root in (CGROUP_V1, CGROUP_V2):
        base = os.path.join(root, GROUP)
        if not os.path.isdir(base):
            continue
        for name in os.listdir(base):
            group = os.path.join(base, name)
            if not os.path.isdir(group):
                continue
            for _ in range(50):  # the ranks' daemons may take a moment to exit
                try:
                    os.rmdir(group)
                    break
                except OSError:
                    time.sleep(0.1)
        try:
            os.rmdir(base)
        except OSError:
            pass


def open_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def write_text(path, value):
    with open(path, "w") as f:
        f.write(value)


def calibration_gflops(args, cpus=None):
    """The rate (GFLOPS, the trainer's own count) of one rank training --calibration-model alone,
    --calibration-micro-batch sequences a micro-batch, on core 0, uncapped or capped at `cpus` of it: the
    median of its steps after the first."""
    if not os.access(args.geotrain, os.X_OK):
        raise EmulationError(f"--device-gflops: {args.geotrain} is not an executable geotrain (--geotrain PATH)")
    train = [args.geotrain, "train", os.path.join(REPO, "inputs", "quickstart.toml"),
             f"--model.file={args.calibration_model}", "--pipeline.stages=1",
             f"--train.micro_batch_sequences={args.calibration_micro_batch}", "--train.gradient_accumulation=2",
             "--train.steps=6", "--optimizer.warmup_steps=1", "--train.log_every_steps=1",
             "--train.eval_every_steps=0", "--train.eval_batches=1", "--checkpoint.dir=", "--timing.file="]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    procs = capped_groups(["calibration"], cpus)[0]["calibration"] if cpus else None
    try:
        join = f'echo $$ > "{procs}" && ' if procs else ""
        done = subprocess.run(["sh", "-c", f'{join}exec taskset -c 0 "$@"', "calibration", *train],
                              capture_output=True, text=True, timeout=600, env=env)
    finally:
        if procs:
            remove_capped_groups()
    output = done.stdout + done.stderr
    rates = [float(x) for x in re.findall(r"^step +\d+/\d+ .*?([0-9.]+) GFLOPS", output, re.M)][1:]
    if done.returncode != 0 or not rates:
        raise EmulationError(f"--device-gflops: the calibration run failed (exit {done.returncode}): "
                             f"{(output.strip().splitlines() or ['no output'])[-1]}")
    return sorted(rates)[len(rates) // 2]


def device_cap(args, cores, log):
    """--cpus-per-rank as given, or the share of a core that trains at --device-gflops: one core's
    calibrated rate gives a first share; a second calibration under that cap corrects it for what the
    quota costs beyond its share (its periods, the caches). With --device-out, the device as JSON."""
    if args.device_gflops is None:
        return args.cpus_per_rank
    if args.cpus_per_rank is not None:
        raise EmulationError("--device-gflops and --cpus-per-rank: give one")
    if not args.device_gflops > 0:
        raise EmulationError("--device-gflops must be > 0")
    core = calibration_gflops(args)
    cpus = args.device_gflops / core
    if not 0.001 <= cpus <= 1:
        raise EmulationError(f"--device-gflops {args.device_gflops:g}: a core here trains "
                             f"{args.calibration_model} at {core:.3g} GFLOPS; a device must be slower than one core")
    capped = calibration_gflops(args, cpus)
    cpus = min(1.0, cpus * args.device_gflops / capped)
    print(f"emulate: every rank a device of {args.device_gflops:g} GFLOPS: {cpus:.3f} of a core that trains "
          f"{os.path.basename(args.calibration_model)} (micro-batch {args.calibration_micro_batch}) at "
          f"{core:.3g} GFLOPS alone", file=log, flush=True)
    if args.device_out:
        with open(args.device_out, "w") as f:
            json.dump({"device_gflops": args.device_gflops, "core_gflops": core, "first_share_gflops": capped,
                       "cpus_per_rank": cpus, "calibration_model": args.calibration_model,
                       "calibration_micro_batch": args.calibration_micro_batch, "cores": cores}, f)
    return cpus


def run_device(cpus, command, timeout_s):
    """COMMAND alone in one cgroup capped at `cpus` of a core."""
    procs = capped_groups(["device"], cpus)[0]["device"]
    try:
        child = subprocess.Popen(["sh", "-c", f'echo $$ > "{procs}" && exec taskset -c 0 "$@"', "device", *command])
        try:
            return child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            print(f"emulate.py: error: the command ran past --timeout {timeout_s:g} s and was killed", file=sys.stderr)
            return 1
    finally:
        remove_capped_groups()


# ---- running ranks in their sites

# Messages up to 16 MiB (a stage's gradient in the experiment) go eagerly:
# over a long link the default rendezvous (request, clear-to-send, data)
# costs three one-way latencies per message instead of one; real WAN
# deployments raise the limit for the same reason.
EAGER = ["--mca", "btl_tcp_eager_limit", str(16 << 20), "--mca", "btl_tcp_rndv_eager_limit", str(16 << 20),
         "--mca", "btl_tcp_max_send_size", str(16 << 20)]

AGENT = """#!/bin/sh
# plm_rsh_agent for the emulation: "remote" host = a rank's namespace, with
# its own host name (<site>-<rank>, from the hostnames file).
host=$1; shift
name=$(sed -n "s/^$host //p" "$(dirname "$0")/hostnames")
# --cpus-per-rank: the rank's daemon and everything it starts join the rank's
# capped cgroup. mpirun runs under `ip netns exec`, which mounts a fresh /sys
# without the cgroup file systems: mount the hierarchy again (the same tree),
# one mount point per rank (mpirun starts the ranks' agents at once).
group=$(sed -n "s/^$host //p" "$(dirname "$0")/cgroups")
if [ -n "$group" ]; then
  tree="$(dirname "$0")/cgroup-$host"
  mkdir -p "$tree"
  mount $(cat "$(dirname "$0")/cgroup-mount") "$tree" || exit 1
  echo $$ > "$tree/$group/cgroup.procs" || exit 1
fi
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0"; exec sh -c "$*"' "${name:-$host}" "$@"
"""


def run(names, counts, command, timeout_s, log, cpus_per_rank=None):
    site = rank_sites(counts)
    with tempfile.TemporaryDirectory(prefix="geotrain-emulate-") as scratch:
        procs, mount = capped_groups([rank_ns(r) for r in range(len(site))], cpus_per_rank) if cpus_per_rank \
            else ({}, "")
        with open(os.path.join(scratch, "cgroups"), "w") as f:
            for ns in procs:  # the group's path inside its hierarchy
                f.write(f"{ns} {GROUP}/{ns}\n")
        with open(os.path.join(scratch, "cgroup-mount"), "w") as f:
            f.write(mount)
        if procs:
            print(f"emulate: every rank a device of {cpus_per_rank:g} of a core (CFS quota, period "
                  f"{cap_period_us(cpus_per_rank) / 1000:g} ms)", file=log, flush=True)
        hostfile = os.path.join(scratch, "hosts")
        with open(hostfile, "w") as f:
            for r in range(len(site)):
                f.write(f"{rank_ns(r)} slots=1\n")
        with open(os.path.join(scratch, "hostnames"), "w") as f:
            for r, s in enumerate(site):
                f.write(f"{rank_ns(r)} {names[s]}-{r}\n")
        agent = os.path.join(scratch, "agent.sh")
        with open(agent, "w") as f:
            f.write(AGENT)
        os.chmod(agent, 0o755)
        mapping = ", ".join(f"{r}:{names[s]}" for r, s in enumerate(site))
        print(f"emulate: ranks -> sites {mapping}", file=log, flush=True)
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        mpirun = ["timeout", "--signal=KILL", str(timeout_s), "ip", "netns", "exec", CONTROL, "mpirun",
                  "--hostfile", hostfile, "-n", str(sum(counts)), "--map-by", "node",
                  "--mca", "plm_rsh_agent", agent, "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp",
                  "--mca", "oob_tcp_if_include", f"{PREFIX}.0.0/16", "--mca", "btl_tcp_if_include",
                  f"{PREFIX}.0.0/16", "--mca", "mpi_yield_when_idle", "1", "-x", "PATH", *EAGER,
                  *[arg for name in ("OMP_NUM_THREADS", "LD_LIBRARY_PATH") if name in os.environ for arg in ("-x", name)],
                  *command]
        return subprocess.run(mpirun, env=env).returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["run", "up", "down", "cut", "heal", "device"])
    parser.add_argument("scenario", nargs="?", help="the scenario (run, up); cut, heal: rank A")
    parser.add_argument("rank_b", nargs="?", type=int, help="cut, heal: rank B")
    parser.add_argument("--sites", help="comma-separated site names to keep (default: all)")
    parser.add_argument("--devices", help="ranks per kept site, comma-separated (default: the scenario's)")
    parser.add_argument("--timeout", type=float, default=1800, help="kill the job after this many seconds")
    parser.add_argument("--bandwidth-scale", type=float, default=1.0, help="multiply every bandwidth (scale down)")
    parser.add_argument("--latency-scale", type=float, default=1.0, help="multiply every latency")
    parser.add_argument("--mtu", type=int, default=1500,
                        help="MTU of every link (larger: fewer packets through the user-space delay)")
    parser.add_argument("--matrix-out", help="write the rank-level matrix of the emulated network here")
    parser.add_argument("--traffic-out", help="run: write the bytes sent between every pair of ranks (JSON) here")
    parser.add_argument("--cpus-per-rank", type=float,
                        help="run, device: cap every rank at this many cores (a device of fixed speed)")
    parser.add_argument("--device-gflops", type=float,
                        help="run, device: cap every rank at this rate instead, the same on every machine: "
                             "the share of a core that gives it, from a calibration run at start-up")
    parser.add_argument("--calibration-model", default=os.path.join(REPO, "inputs", "models", "emulation.toml"),
                        help="--device-gflops: the model the calibration trains (the job's, for its GEMM shapes)")
    parser.add_argument("--calibration-micro-batch", type=int, default=2,
                        help="--device-gflops: sequences per micro-batch in the calibration (the job's)")
    parser.add_argument("--geotrain", default=os.path.join(REPO, "build", "release", "geotrain"),
                        help="--device-gflops: the geotrain binary the calibration runs")
    parser.add_argument("--device-out", help="--device-gflops: write the device's rate and cap here (JSON)")
    args, rest = parser.parse_known_args()
    if rest and rest[0] == "--":
        rest = rest[1:]
    if os.geteuid() != 0:
        sys.exit("emulate.py: error: run as root (network namespaces)")
    cores = os.cpu_count() or 1
    if args.cpus_per_rank is not None and not 0.001 <= args.cpus_per_rank <= cores:
        sys.exit(f"emulate.py: error: --cpus-per-rank must be in [0.001, {cores}] (this machine's cores)")
    if args.action in ("run", "device"):
        try:
            args.cpus_per_rank = device_cap(args, cores, sys.stderr)
        except (EmulationError, OSError, subprocess.TimeoutExpired) as error:
            sys.exit(f"emulate.py: error: {error}")
    if args.action == "device":
        if not (rest and args.cpus_per_rank):
            sys.exit("emulate.py: error: device needs --cpus-per-rank F or --device-gflops G -- COMMAND ...")
        try:
            return run_device(args.cpus_per_rank, rest, args.timeout)
        except EmulationError as error:
            sys.exit(f"emulate.py: error: {error}")
    if args.action == "down":
        down()
        return 0
    if args.action in ("cut", "heal"):
        try:
            a = int(args.scenario)
            if args.rank_b is None or a == args.rank_b or min(a, args.rank_b) < 0:
                raise ValueError
            cut(a, args.rank_b, args.action == "cut")
        except (TypeError, ValueError):
            sys.exit(f"emulate.py: error: {args.action} needs two different rank numbers: emulate.py {args.action} A B")
        except EmulationError as error:
            sys.exit(f"emulate.py: error: {error}")
        print(f"emulate: link {a} <-> {args.rank_b} {'cut (100% loss)' if args.action == 'cut' else 'restored'}",
              file=sys.stderr)
        return 0
    if not args.scenario:
        sys.exit("emulate.py: error: a scenario file is needed")
    if args.action == "run" and not rest:
        sys.exit("emulate.py: error: nothing to run: emulate.py run SCENARIO -- COMMAND ...")
    for tool in ("ip", "tc", "iptables-legacy", "unshare", "mpirun"):
        if shutil.which(tool) is None:
            sys.exit(f"emulate.py: error: {tool} not found (bash jobs/install-deps.sh)")
    try:
        names, counts, latency, bandwidth, shared = load_sites(
            args.scenario, args.sites.split(",") if args.sites else None,
            [int(x) for x in args.devices.split(",")] if args.devices else None)
    except (EmulationError, ValueError, KeyError) as error:
        sys.exit(f"emulate.py: error: {error}")
    if not (args.bandwidth_scale > 0 and args.latency_scale >= 0):
        sys.exit("emulate.py: error: --bandwidth-scale must be > 0 and --latency-scale >= 0")
    if not 576 <= args.mtu <= 65535:
        sys.exit("emulate.py: error: --mtu must be in [576, 65535]")
    latency = [[x * args.latency_scale for x in row] for row in latency]
    bandwidth = [[x * args.bandwidth_scale for x in row] for row in bandwidth]
    shared = {key: [x * args.bandwidth_scale for x in rates] for key, rates in shared.items()}
    if args.matrix_out:
        write_matrix(args.matrix_out, args.scenario, names, counts, latency, bandwidth, shared)
    delay = None
    code = 1
    # Any exit (error, Ctrl-C, SIGTERM from a scheduler) tears the network down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        started = time.monotonic()
        delay = up(names, counts, latency, bandwidth, sys.stderr, args.mtu, shared)
        print(f"emulate: network up in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
        if args.action == "up":
            print("emulate: up; `emulate.py down` removes it", file=sys.stderr)
            delay = None  # leave it running
            return 0
        started = time.monotonic()
        if args.cpus_per_rank and args.cpus_per_rank * sum(counts) > cores:
            print(f"emulate: warning: {sum(counts)} ranks x {args.cpus_per_rank:g} cores exceed this machine's "
                  f"{cores}: the devices will not get their share", file=sys.stderr, flush=True)
        code = run(names, counts, rest, args.timeout, sys.stderr, args.cpus_per_rank)
        print(f"emulate: command done in {time.monotonic() - started:.1f} s (exit {code})", file=sys.stderr, flush=True)
        if args.traffic_out:
            with open(args.traffic_out, "w") as f:
                json.dump(traffic(names, counts), f)
        if delay is not None and delay.poll() is not None:
            print("emulate.py: error: geotrain-netdelay died during the run (traffic stopped)", file=sys.stderr)
            code = code or 1
    except EmulationError as error:
        print(f"emulate.py: error: {error}", file=sys.stderr)
        code = 1
    finally:
        if args.action == "run":
            if delay is not None:
                delay.terminate()
                try:
                    delay.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    delay.kill()
            down()
            remove_capped_groups()
    return code


if __name__ == "__main__":
    sys.exit(main())
