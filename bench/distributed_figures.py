#!/usr/bin/env python3
"""Figures of the distributed runtime on this machine, written as markdown:
  1. measured pipeline idle fraction against the bubble (p-1)/(m+p-1);
  2. the step time split (compute / pipeline / gradient sync / optimizer) at
     8 ranks for every pp x dp, beside the single-rank run of the same
     global batch (the peer: same binary, same cores, no parallelism);
  3. the time `geotrain probe` takes for 8 and 16 ranks.

usage: python3 bench/distributed_figures.py [--out analysis/results/distributed_cpu.md] [--quick]
Run from the repository root after building the release preset.
"""
import argparse
import os
import platform
import re
import subprocess
import sys
import time

GEOTRAIN = "build/release/geotrain"
MPIRUN = ["mpirun", "--oversubscribe", "--mca", "btl", "self,vader,tcp", "--mca", "pml", "ob1",
          "--mca", "mpi_yield_when_idle", "1"]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(command, env=ENV):
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stdout}\n{done.stderr}")
    return done.stdout


def train(ranks, overrides, steps):
    command = [GEOTRAIN, "train", "inputs/quickstart.toml", f"--train.steps={steps}", "--train.eval_every_steps=0",
               "--train.eval_batches=1", "--train.log_every_steps=1000000", "--optimizer.warmup_steps=1", *overrides]
    out = run([*MPIRUN, "-n", str(ranks), *command] if ranks > 1 else command + ["--pipeline.stages=1"])
    split = re.search(r"time per step \(mean over \d+ ranks\): ([\d.]+) ms = compute ([\d.]+) \+ pipeline ([\d.]+) "
                      r"\+ data-parallel ([\d.]+) \+ optimizer ([\d.]+) ms", out)
    tokens = float(re.search(r"final validation loss \S+ \(before training \S+\), (\d+) tokens/s", out).group(1))
    if split is None:  # one rank prints no split
        return {"tokens_per_s": tokens}
    keys = ["step", "compute", "pipeline", "sync", "optimizer"]
    return dict(zip(keys, map(float, split.groups())), tokens_per_s=tokens)


def machine_facts():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mpi = run(["mpirun", "--version"]).splitlines()[0]
    return f"{cpu}, {os.cpu_count()} cores visible, {platform.system()} {platform.release()}, {mpi}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="analysis/results/distributed_cpu.md")
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    args = parser.parse_args()
    steps = 6 if args.quick else 30
    lines = ["# Distributed runtime on one CPU machine", "",
             f"Regenerate: `python3 bench/distributed_figures.py` (release build; {steps} steps per run, the first "
             "excluded from the means). Machine: " + machine_facts() + ". Model: tiny (4 layers, hidden 128, "
             "sequence 128, 0.84 M parameters), fp32, CPU kernels. All ranks share this machine's cores over "
             "Open MPI's shared-memory transport, so the figures show the runtime's own overheads and the pipeline "
             "schedule, not a network.", ""]

    lines += ["## 1. Pipeline idle time against the bubble (p-1)/(m+p-1)", "",
              "Idle = time a rank spends in the pipeline's sends and receives (waiting included) as a share of its "
              "pipeline phase (compute + that); mean over ranks. 4 sequences per micro-batch. p = 2 gives each "
              "stage its own core; p = 4 shares 2 cores between 4 stages (stages that compute at the same time "
              "slow each other down, and a waiting rank's core goes to the others), so its figures mix the "
              "schedule with CPU sharing. The first and last stage hold the embedding and the head, so stages are "
              "not exactly equal either.", "",
              "| p | m | schedule | measured idle | (p-1)/(m+p-1) |", "|---|---|---|---|---|"]
    for p, ms in ((2, (1, 2, 4, 8)), (4, (1, 4, 8))):
        for m in ms:
            for schedule in ("gpipe", "1f1b"):
                r = train(p, [f"--pipeline.stages={p}", f"--pipeline.schedule={schedule}",
                              f"--train.gradient_accumulation={m}", "--train.micro_batch_sequences=4",
                              "--pipeline.placement=rank-order", "--network.deadline_s=300"], steps)
                idle = r["pipeline"] / (r["pipeline"] + r["compute"])
                lines.append(f"| {p} | {m} | {schedule} | {100 * idle:.1f}% | {100 * (p - 1) / (m + p - 1):.1f}% |")
        print("\n".join(lines[-8:]), flush=True)

    lines += ["", "## 2. Step time at 8 ranks", "",
              "Global batch per step: 8 micro-batches of 2 sequences (m = 8 / dp per replica), 1F1B, planned "
              "placement. Times are means over the 8 ranks, ms per step. Gradient sync = data-parallel all-reduce, "
              "tied embedding and global norm, including the wait for the slowest rank of each group. Peer: the "
              "same binary alone with 2 threads on the same global batch.", "",
              "| pp x dp | step ms | compute | pipeline | gradient sync | optimizer | tokens/s | vs 1 rank |",
              "|---|---|---|---|---|---|---|---|"]
    alone = train(1, ["--train.gradient_accumulation=8", "--train.micro_batch_sequences=2"], steps)
    for pp, dp in ((4, 2), (2, 4), (1, 8)):  # the tiny model has 4 layers: pp <= 4
        r = train(8, [f"--pipeline.stages={pp}", f"--train.gradient_accumulation={8 // dp}",
                      "--train.micro_batch_sequences=2", "--network.deadline_s=300"], steps)
        lines.append(f"| {pp} x {dp} | {r['step']:.1f} | {r['compute']:.1f} | {r['pipeline']:.1f} | {r['sync']:.1f} | "
                     f"{r['optimizer']:.1f} | {r['tokens_per_s']:.0f} | {r['tokens_per_s'] / alone['tokens_per_s']:.2f}x |")
        print(lines[-1], flush=True)
    lines.append(f"| 1 rank, 2 threads | | | | | | {alone['tokens_per_s']:.0f} | 1.00x |")
    lines.append("")

    lines += ["## 3. Probe time", "", "`mpirun -n N geotrain probe --out /tmp/net.toml` (tournament of N-1 "
              "rounds; warm-up, 20 latency round trips and 4 bandwidth messages each way per pair). Wall time of "
              "the probe as geotrain reports it.", "", "| ranks | message | probe s |", "|---|---|---|"]
    for n in (8, 16):
        for size in (1 << 20, 4 << 20):
            out = run([*MPIRUN, "-n", str(n), GEOTRAIN, "probe", "--out", "/tmp/geotrain-probe.toml", "--bytes",
                       str(size), "--deadline-s", "120"])
            seconds = float(re.search(r"probed \d+ ranks in ([\d.]+) s", out).group(1))
            lines.append(f"| {n} | {size >> 20} MiB | {seconds:.2f} |")
            print(lines[-1], flush=True)
    lines += ["", "## Reading", "",
              "- With a core per stage (p = 2) the measured idle share follows (p-1)/(m+p-1) within a few points: "
              "slightly below it at m <= 2 (sends and copies overlap the other stage's compute) and slightly above at "
              "m >= 4 (per-micro-batch transfer and staging costs add to the bubble).",
              "- p = 4 on 2 cores: at m = 1 the stages run one at a time and the share matches the bubble; at larger m "
              "the steady state has several stages computing on the same 2 cores, which lengthens their phases "
              "unevenly and raises the idle share above the formula. This is CPU sharing, not the schedule.",
              "- At 8 ranks on 2 cores every configuration is oversubscribed 4x; throughput stays within 10% of the "
              "same binary alone (2 threads), so the runtime's messages, copies and waits cost about what the "
              "parallelism of 8 processes on 2 cores can hide. Pure data parallelism (1 x 8) pays the most gradient "
              "sync (8 copies of the model's gradient summed per step).",
              "- The probe grows with the N-1 rounds and the message size; on one machine it measures the "
              "shared-memory transport, so real links will take longer (4 MiB messages over 1 Gbit/s: about 35 ms "
              "each).", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
