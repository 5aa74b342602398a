#!/usr/bin/env python3
"""Devices of fixed speed under the WAN emulator (emulate.py --cpus-per-rank):

- `emulate.py device --cpus-per-rank 0.2` runs a loop that burns 0.3 s of
  CPU; capped at a fifth of a core it cannot finish in less than
  0.3 / 0.2 = 1.5 s of wall time (asserted: >= 1.0 s, a margin for the
  quota's first period; uncapped it takes 0.3 s);
- `emulate.py run --cpus-per-rank 0.3` puts every rank in its own capped
  cgroup (each rank prints /proc/self/cgroup: 4 ranks, 4 different groups
  named after their namespaces);
- bad input (a cap above the machine's cores, `device` without a cap) exits
  non-zero with one line naming the option;
- nothing is left under the cgroup mount afterwards.

usage: check_cpu_cap.py  (as root, cgroup cpu controller mounted)
"""
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
EMULATE = os.path.join(REPO, "jobs", "emulate", "emulate.py")
SCENARIO = os.path.join(REPO, "inputs", "scenarios", "emulation-test.toml")
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint('burnt')"
GROUP_DIRS = ("/sys/fs/cgroup/cpu/geotrain-emulate", "/sys/fs/cgroup/geotrain-emulate")


def emulate(*args, timeout=300):
    return subprocess.run([sys.executable, EMULATE, *args], capture_output=True, text=True, timeout=timeout)


def main():
    failures = []
    started = time.monotonic()
    done = emulate("device", "--cpus-per-rank", "0.2", "--", sys.executable, "-c", BURN)
    wall = time.monotonic() - started
    if done.returncode != 0 or "burnt" not in done.stdout:
        failures.append(f"device run failed (exit {done.returncode}): {done.stderr.strip()}")
    elif wall < 1.0:
        failures.append(f"0.3 s of CPU at 0.2 of a core took {wall:.2f} s of wall time: the cap was not applied")
    print(f"device: 0.3 s of CPU capped at 0.2 of a core took {wall:.2f} s")

    done = emulate("run", SCENARIO, "--cpus-per-rank", "0.3", "--", "/bin/cat", "/proc/self/cgroup")
    groups = set(re.findall(r"geotrain-emulate/(gt-d\d+)", done.stdout))
    if done.returncode != 0 or groups != {"gt-d0", "gt-d1", "gt-d2", "gt-d3"}:
        failures.append(f"run: ranks in groups {sorted(groups)} (exit {done.returncode}), want gt-d0..gt-d3: "
                        f"{done.stderr.strip()[-500:]}")
    print(f"run: ranks in capped groups {sorted(groups)}")

    cores = os.cpu_count() or 1

    for args, field in ((("device", "--cpus-per-rank", str(cores + 1), "--", "true"), "--cpus-per-rank"),
                        (("device", "--", "true"), "--cpus-per-rank")):
        done = emulate(*args)
        lines = done.stderr.strip().splitlines()
        if done.returncode == 0 or len(lines) != 1 or field not in lines[0]:
            failures.append(f"{' '.join(args)}: exit {done.returncode}, stderr {done.stderr.strip()!r}: want one "
                            f"line naming {field}")

    left = [d for d in GROUP_DIRS if os.path.exists(d)]
    if left:
        failures.append(f"cgroups left behind: {left}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("ok: capped devices (device and run), bad input, nothing left behind")


if __name__ == "__main__":
    main()
