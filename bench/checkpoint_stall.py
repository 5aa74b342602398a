#!/usr/bin/env python3
"""Checkpoint cost, today's gathered synchronous write against the sharded
asynchronous one, measured in one run of this script: the same model, data,
seed and layout under mpirun, once per variant:

  single-sync     checkpoint.form = single,  checkpoint.asynchronous = false (the old behaviour:
                  rank 0 gathers every stage and writes while training waits)
  single-async    checkpoint.form = single,  asynchronous = true (the gather stays on the training thread)
  sharded-async   checkpoint.form = sharded, asynchronous = true (one shard per writing rank, serial HDF5)
  parallel-sync   checkpoint.form = parallel, asynchronous = false (one file written by every rank through
                  parallel HDF5; training waits: with single-sync, the write throughput)
  parallel-async  checkpoint.form = parallel, asynchronous = true (the default under mpirun on a shared folder)
  per-site-async  checkpoint.form = per_site, asynchronous = true (one shard per site; give --matrix, a
                  scenario with [sites] for the ranks)
  parallel-snapshot  parallel-async with checkpoint.snapshot = true (a host copy first: the optimizer
                  waits for the copy only, not the write)

For each: the training thread's time in checkpointing (the timing file's
`checkpoint` events, max over ranks per checkpoint, the next optimizer
step's wait for a write that reads the live state included: the snapshot, the gather in
the single form, waiting for a write still in flight, publishing), for the
mid-run checkpoints and for the final one (the end of training waits for
it); the step time while a write is in flight against the others (the
background thread shares the cores); each rank's peak RSS (/usr/bin/time);
the checkpoint's size.

usage: checkpoint_stall.py GEOTRAIN CONFIG WORKDIR [--ranks N] [--stages S] [--steps K] [--every E]
                           [--model FILE] [--sequence-length T] [--variants a,b] [--out FILE.md] -- MPIRUN...
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import h5py

VARIANTS = {
    "single-sync": ["--checkpoint.form=single", "--checkpoint.asynchronous=false"],
    "single-async": ["--checkpoint.form=single", "--checkpoint.asynchronous=true"],
    "sharded-async": ["--checkpoint.form=sharded", "--checkpoint.asynchronous=true"],
    "parallel-sync": ["--checkpoint.form=parallel", "--checkpoint.asynchronous=false"],
    "parallel-async": ["--checkpoint.form=parallel", "--checkpoint.asynchronous=true"],
    "per-site-async": ["--checkpoint.form=per_site", "--checkpoint.asynchronous=true"],
    "parallel-snapshot": ["--checkpoint.form=parallel", "--checkpoint.asynchronous=true", "--checkpoint.snapshot=true"],
}
CHECKPOINT_KIND = "checkpoint"


def run_variant(args, mpirun, name, work):
    directory = os.path.join(work, name)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    timing = os.path.join(directory, "timing.h5")
    train = [args.geotrain, "train", args.config, f"--model.file={args.model}",
             f"--model.sequence_length={args.sequence_length}", f"--pipeline.stages={args.stages}",
             f"--train.steps={args.steps}", "--train.eval_every_steps=0", "--train.eval_batches=1",
             "--train.micro_batch_sequences=1", "--train.gradient_accumulation=2", "--optimizer.warmup_steps=1",
             "--train.log_json=true", f"--checkpoint.dir={directory}/ckpt", f"--checkpoint.every_steps={args.every}",
             "--checkpoint.keep=2", f"--timing.file={timing}", "--train.metrics_file=", *VARIANTS[name],
             *([f"--network.matrix={args.matrix}"] if args.matrix else [])]
    # Each rank under /usr/bin/time, its peak RSS in rss.<rank>.
    wrapped = ["sh", "-c", f'exec /usr/bin/time -f %M -o {directory}/rss.$OMPI_COMM_WORLD_RANK "$@"', "sh", *train]
    start = time.monotonic()
    done = subprocess.run([*mpirun, "-n", str(args.ranks), *wrapped], capture_output=True, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"{name}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    rss = [int(open(os.path.join(directory, f"rss.{r}")).read().split()[-1]) / 2**20 for r in range(args.ranks)]
    figures = dict(name=name, wall_s=wall, rss_gib=rss, **read_timing(timing, args), **checkpoint_size(directory))
    shutil.rmtree(os.path.join(directory, "ckpt"))  # GiBs per variant; the figures are what the report needs
    return figures


def read_timing(path, args):
    with h5py.File(path, "r") as f:
        events = f["events"]
        kinds = h5py.check_enum_dtype(events["kind"].dtype)
        code = kinds[CHECKPOINT_KIND]
        kind, step, rank = events["kind"][()], events["step"][()], events["rank"][()]
        begin = events["start"][()]
        duration = events["end"][()] - begin
        optimizer_code = kinds["optimizer"]
        wall = f["steps/wall_time"][()]  # [ranks, steps]
        stage, replica = f["plan/stage_of_rank"][()], f["plan/replica_of_rank"][()]
        sent, peer = events["bytes"][()], events["peer"][()]
        site = [x.decode() if isinstance(x, bytes) else str(x) for x in f["network/site"][()]] \
            if "site" in f["network"] else []
    replicas = int(max(replica)) + 1
    # The ranks that hold a stage's tensors to write (sharded) or send (single): stage s, replica s mod replicas.
    writers = [int(replica[r]) == int(stage[r]) % replicas for r in range(len(stage))]
    # A rank's time on the training thread per checkpoint: at the step it is
    # saved (after that step's optimizer: its save, and the wait for an
    # earlier write still in flight), then every checkpoint event until the
    # next one's save: the next optimizer step's wait for the write that
    # reads the live state (CPU), and the later steps' agreeing on it and
    # publishing it. The last step's events after its optimizer are the
    # final checkpoint's.
    checkpoints = [s for s in range(args.every, args.steps, args.every)]
    saved_at = set(checkpoints) | {args.steps}
    optimizer_start = {(int(r), int(s)): float(b) for k, s, r, b in zip(kind, step, rank, begin) if k == optimizer_code}
    owned = {}  # (rank, checkpoint step, or 0 before the first) -> seconds
    for k, s, r, b, d in zip(kind, step, rank, begin, duration):
        if k != code:
            continue
        s, r = int(s), int(r)
        saving = s in saved_at and b >= optimizer_start.get((r, s), float("-inf"))
        owner = s if saving else max((c for c in checkpoints if c < s), default=0)
        owned[(r, owner)] = owned.get((r, owner), 0.0) + float(d)
    ranks = {r for r, _ in owned}
    per_step = {c: max((owned.get((r, c), 0.0) for r in ranks), default=0.0) for c in sorted(saved_at)}
    quiet = [max((owned.get((r, 0), 0.0) for r in ranks), default=0.0)]
    step_time = wall.max(axis=0)  # the slowest rank's time per step
    # Steps after a mid-run checkpoint and before the next one, while a write may be in flight.
    after = [s for s in range(2, args.steps + 1) if (s - 1) in checkpoints]
    others = [s for s in range(2, args.steps + 1) if s not in after]  # step 1 warms up: left out
    # Bytes the checkpoints sent between ranks (the single form's gather), and across sites.
    at_checkpoint = (kind == code) & (peer >= 0)
    sent_total = int(sent[at_checkpoint].sum())
    crossing = sum(int(b) for r, p, b in zip(rank[at_checkpoint], peer[at_checkpoint], sent[at_checkpoint])
                   if site and site[int(r)] != site[int(p)])
    return dict(mid_stall_s=[per_step.get(s, 0.0) for s in checkpoints],
                sent_gib=sent_total / 2**30, crossing_sites_gib=crossing / 2**30 if site else None,
                other_steps_s=sum(quiet), final_s=per_step.get(args.steps, 0.0),
                step_after_checkpoint_s=statistics.median([step_time[s - 1] for s in after]) if after else 0.0,
                step_other_s=statistics.median([step_time[s - 1] for s in others]) if others else 0.0,
                writer=writers)


def checkpoint_size(directory):
    total = 0
    latest = open(os.path.join(directory, "ckpt", "latest")).read().strip()
    path = os.path.join(directory, "ckpt", latest)
    for root, _, names in os.walk(path) if os.path.isdir(path) else [(os.path.dirname(path), [], [latest])]:
        total += sum(os.path.getsize(os.path.join(root, n)) for n in names)
    return dict(checkpoint_gib=total / 2**30, checkpoint=latest)


def table(results):
    lines = ["| variant | training thread per mid-run checkpoint (s) | final checkpoint wait (s) | "
             "step after a checkpoint / other steps (s) | peak RSS per rank (GiB; * holds a stage to write) | "
             "sent between ranks / across sites per run (GiB) | write throughput (GiB/s) | run (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        mids = ", ".join(f"{s:.2f}" for s in r["mid_stall_s"])
        rss = ", ".join(f"{x:.2f}{'*' if w else ''}" for x, w in zip(r["rss_gib"], r["writer"]))
        crossing = "-" if r["crossing_sites_gib"] is None else f"{r['crossing_sites_gib']:.2f}"
        # Synchronous variants: the whole checkpoint (gather, write, fsync, publish) in the training thread's time.
        stalls = r["mid_stall_s"] + [r["final_s"]]
        throughput = f"{r['checkpoint_gib'] / statistics.mean(stalls):.2f}" if r["name"].endswith("-sync") else "-"
        lines.append(f"| {r['name']} | {mids} | {r['final_s']:.2f} | {r['step_after_checkpoint_s']:.2f} / "
                     f"{r['step_other_s']:.2f} | {rss} | {r['sent_gib']:.2f} / {crossing} | {throughput} | "
                     f"{r['wall_s']:.0f} |")
    return "\n".join(lines)


def stall_ratios(results):
    """The issue's stall goal: each variant's mean time per mid-run
    checkpoint against the gathered synchronous write's, in the same run."""
    before = next((r for r in results if r["name"] == "single-sync"), None)
    if before is None or not before["mid_stall_s"]:
        return ""
    reference = statistics.mean(before["mid_stall_s"])
    return "\n".join(f"- {r['name']}: mean {statistics.mean(r['mid_stall_s']):.2f} s per mid-run checkpoint = "
                     f"{100 * statistics.mean(r['mid_stall_s']) / reference:.1f}% of single-sync's {reference:.2f} s"
                     for r in results if r is not before and r["mid_stall_s"])


def main():
    separator = sys.argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("geotrain")
    parser.add_argument("config")
    parser.add_argument("workdir")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--model", default="inputs/models/gpt2-124m.toml")
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--variants", default="single-sync,single-async,sharded-async,parallel-sync,parallel-async")
    parser.add_argument("--matrix", help="network.matrix for every variant (a scenario with [sites]: per_site)")
    parser.add_argument("--json", help="also write the raw figures here")
    args = parser.parse_args(sys.argv[1:separator])
    mpirun = sys.argv[separator + 1:]
    results = []
    for name in args.variants.split(","):
        results.append(run_variant(args, mpirun, name, args.workdir))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(table(results))
    print(stall_ratios(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
