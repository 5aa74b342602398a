#!/usr/bin/env python3
"""Devices of fixed speed under the WAN emulator (emulate.py --cpus-per-rank):

- `emulate.py device --cpus-per-rank 0.2` runs a loop that burns 0.3 s of
  CPU; capped at a fifth of a core it cannot finish in less than
  0.3 / 0.2 = 1.5 s of wall time (asserted: >= 1.0 s, a margin for the
  quota's first period; uncapped it takes 0.3 s);
- `emulate.py run --cpus-per-rank 0.3` puts every rank in its own capped
  cgroup (each rank prints /proc/self/cgroup: 4 ranks, 4 different groups
  named after their namespaces);
- `emulate.py device --device-gflops G` (G: 40% of what one core here
  trains the emulation model at, measured by this test uncapped) runs the
  same training at G within 30% (the cap comes from the script's own
  calibration, with a correction under the cap; runs of a capped device
  vary by about 10% here);
- bad input (a cap above the machine's cores, `device` without a cap,
  --device-gflops with --cpus-per-rank or above a core's rate) exits
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


GEOTRAIN = os.path.join(REPO, "build", "release", "geotrain")
TRAIN = [GEOTRAIN, "train", os.path.join(REPO, "inputs", "quickstart.toml"),
         "--model.file=" + os.path.join(REPO, "inputs", "models", "emulation.toml"), "--pipeline.stages=1",
         "--train.micro_batch_sequences=2", "--train.gradient_accumulation=2", "--train.steps=6",
         "--optimizer.warmup_steps=1", "--train.log_every_steps=1", "--train.eval_every_steps=0",
         "--train.eval_batches=1", "--checkpoint.dir=", "--timing.file="]


def median_gflops(output):
    """The median of a training run's GFLOPS after its first step (the progress lines)."""
    rates = sorted(float(x) for x in re.findall(r"^step +\d+/\d+ .*?([0-9.]+) GFLOPS", output, re.M)[1:])
    return rates[len(rates) // 2] if rates else 0.0


def check_device_gflops(failures):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    alone = subprocess.run(["taskset", "-c", "0", *TRAIN], capture_output=True, text=True, timeout=300, env=env)
    core = median_gflops(alone.stdout + alone.stderr)
    if alone.returncode != 0 or core <= 0:
        failures.append(f"the uncapped training run failed (exit {alone.returncode})")
        return
    asked = 0.4 * core
    done = subprocess.run([sys.executable, EMULATE, "device", "--device-gflops", f"{asked:.2f}", "--",
                           "env", "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", *TRAIN],
                          capture_output=True, text=True, timeout=600)
    got = median_gflops(done.stdout + done.stderr)
    print(f"device --device-gflops {asked:.1f} (a core here: {core:.1f} alone): trained at {got:.1f} GFLOPS")
    if done.returncode != 0 or not 0.7 * asked <= got <= 1.3 * asked:
        failures.append(f"--device-gflops {asked:.1f}: trained at {got:.1f} GFLOPS (exit {done.returncode}), want "
                        f"within 30%: {done.stderr.strip()[-300:]}")
    for args, field in ((("device", "--device-gflops", "10", "--cpus-per-rank", "0.5", "--", "true"), "--device-gflops"),
                        (("device", "--device-gflops", f"{2 * core:.0f}", "--", "true"), "--device-gflops")):
        done = emulate(*args)
        lines = done.stderr.strip().splitlines()
        if done.returncode == 0 or len(lines) != 1 or field not in lines[0]:
            failures.append(f"{' '.join(args)}: exit {done.returncode}, stderr {done.stderr.strip()!r}: want one "
                            f"line naming {field}")


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

    check_device_gflops(failures)

    left = [d for d in GROUP_DIRS if os.path.exists(d)]
    if left:
        failures.append(f"cgroups left behind: {left}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("ok: capped devices (device and run, by share and by GFLOPS), bad input, nothing left behind")


if __name__ == "__main__":
    main()
