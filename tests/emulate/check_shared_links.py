#!/usr/bin/env python3
"""The WAN emulator shares links as the planner's flow model does
(src/plan/flow_sharing.cpp): TCP streams between emulated ranks that run at
once, timed against the flow model's figure worked out by hand, with the
pair-only model's beside it. Two sites A and B, ranks 0, 2 at A and 1, 3 at B
(mpirun's round-robin), 1 Gbit/s inside a site, 0.2 Gbit/s between sites.

1. Site uplink of 0.2 Gbit/s: 0 -> 1 and 2 -> 3 (both A -> B), 8 MB each,
   share A's uplink out: 12.5 MB/s each, both done after 16 MB / 25 MB/s =
   0.64 s (pair-only: each alone on its 25 MB/s pair, 0.32 s).
2. NICs of 0.3 Gbit/s (37.5 MB/s), no uplink: 1, 2, 3 -> 0, 6 MB each:
   rank 0's receiving side gives each 12.5 MB/s (below the inter-site pairs'
   25): all done after 18 MB / 37.5 MB/s = 0.48 s (pair-only: 1 -> 0 and
   3 -> 0 at 25 MB/s, 0.24 s).
3. No nic_gbps (3 ranks at A: 0, 2, 3): each NIC is assumed at its fastest
   link, as geotrain assumes (plan::nics_at_fastest_link), here 1 Gbit/s:
   2 -> 0 and 3 -> 0, 15 MB each, share rank 0's receiving side: done after
   30 MB / 125 MB/s = 0.24 s (pair-only: 0.12 s).
Each measured time within 15 % of the flow model's.

usage: check_shared_links.py WORKDIR  (as root)
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from conclude import conclude  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EMULATE = os.path.join(HERE, "..", "..", "jobs", "emulate", "emulate.py")
PORT = 47011
MB = 1e6

# One stream end: "recv COUNT" accepts COUNT connections, reads each to its
# end, prints the monotonic time of the last byte; "send HOST BYTES" connects,
# says "connected", waits for a line on stdin, sends, closes.
STREAM = r'''
import socket, sys, threading, time
if sys.argv[1] == "recv":
    count = int(sys.argv[2])
    server = socket.create_server(("0.0.0.0", %d), backlog=count)
    print("ready", flush=True)
    last = []
    def drain(conn):
        while conn.recv(1 << 20):
            pass
        last.append(time.monotonic())
    threads = []
    for _ in range(count):
        conn, _ = server.accept()
        threads.append(threading.Thread(target=drain, args=(conn,)))
        threads[-1].start()
    for t in threads:
        t.join()
    print(max(last), flush=True)
else:
    conn = socket.create_connection((sys.argv[2], %d))
    print("connected", flush=True)
    sys.stdin.readline()
    block, left = b"x" * (1 << 16), int(sys.argv[3])
    while left > 0:
        left -= conn.send(block[:min(left, len(block))])
    conn.close()
''' % (PORT, PORT)


def address(rank):
    return f"10.213.{rank + 1}.2"


def in_rank(rank, *args):
    return subprocess.Popen(["ip", "netns", "exec", f"gt-d{rank}", sys.executable, "-c", STREAM, *map(str, args)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def timed_streams(streams):
    """Seconds from the go to the last byte of `streams` [(from, to, bytes)] run at once."""
    receivers = {}
    for to in sorted({t for _, t, _ in streams}):
        receivers[to] = in_rank(to, "recv", sum(1 for _, t, _ in streams if t == to))
        if receivers[to].stdout.readline().strip() != "ready":
            raise RuntimeError(f"the receiver in rank {to} did not start")
    senders = [in_rank(a, "send", address(b), int(size)) for a, b, size in streams]
    for sender in senders:
        if sender.stdout.readline().strip() != "connected":
            raise RuntimeError("a sender did not connect")
    import time
    go = time.monotonic()
    for sender in senders:
        sender.stdin.write("go\n")
        sender.stdin.flush()
    for sender in senders:
        sender.wait(timeout=60)
    last = max(float(r.communicate(timeout=60)[0].strip()) for r in receivers.values())
    return last - go


def scenario(path, extra, devices):
    with open(path, "w") as f:
        f.write(f'[sites]\nnames = ["A", "B"]\ndevices = {devices}\nintra_latency_ms = 0.5\nintra_bandwidth_gbps = 1\n'
                f"inter_latency_ms = 2\ninter_bandwidth_gbps = 0.2\n{extra}\n")


def measure(workdir, name, extra, streams, predicted, pair_only, failures, devices="[2, 2]"):
    path = os.path.join(workdir, f"{name}.toml")
    scenario(path, extra, devices)
    log = os.path.join(workdir, f"{name}.log")
    with open(log, "w") as out:  # a file, not a pipe: the delay program stays up with it open
        up = subprocess.run([sys.executable, EMULATE, "up", path], stdout=out, stderr=out, timeout=120)
    try:
        if up.returncode != 0:
            with open(log) as f:
                failures.append(f"{name}: emulate.py up exited {up.returncode}: {f.read()[-2000:]}")
            return
        seconds = min(timed_streams(streams) for _ in range(2))  # the better of two: one may meet a hiccup
    finally:
        subprocess.run([sys.executable, EMULATE, "down"], capture_output=True, timeout=60)
    error = seconds / predicted - 1
    print(f"{name}: measured {seconds:.3f} s, flow model {predicted:.3f} s ({error:+.0%}), pair-only model "
          f"{pair_only:.3f} s")
    if abs(error) > 0.15:
        failures.append(f"{name}: measured {seconds:.3f} s, the flow model says {predicted:.3f} s ({error:+.0%})")


def main():
    workdir = sys.argv[1]
    os.makedirs(workdir, exist_ok=True)
    failures = []
    measure(workdir, "site-uplink", "uplink_gbps = 0.2", [(0, 1, 8 * MB), (2, 3, 8 * MB)], 16 / 25, 8 / 25, failures)
    measure(workdir, "nic-fan-in", "nic_gbps = 0.3", [(1, 0, 6 * MB), (2, 0, 6 * MB), (3, 0, 6 * MB)],
            18 / 37.5, 6 / 25, failures)
    measure(workdir, "nic-assumed", "", [(2, 0, 15 * MB), (3, 0, 15 * MB)], 30 / 125, 15 / 125, failures,
            devices="[3, 1]")
    conclude(failures, "emulated shared links: a site uplink and a NIC share as the flow model says")


if __name__ == "__main__":
    main()
