#!/usr/bin/env python3
"""The timing file and the analysis scripts, checked against numbers that do
not come from them.

Trains 12 steps under mpirun (2 stages x 2 replicas) and 6 steps alone, each
writing a timing file, then checks:
  - the file's structure (h5dump) and its events against the plan: every rank
    runs m forwards and m backwards per step; activations go to the plan's
    next rank and gradients to its previous one, with B*T*H*4 bytes each;
  - the events cover each rank's wall time (per-rank totals add up to the wall
    time within 5%), computed here from the raw columns;
  - /steps against geotrain's own progress lines (loss, rank 0's step time)
    and its closing breakdown (compute and optimizer per step, within 5%);
  - timing_report.py --json against the same raw computations, and its plots
    and compare_runs.py's plots as readable PNG images.

usage: check_timing_report.py GEOTRAIN CONFIG WORKDIR -- MPIRUN...
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ANALYSIS = os.path.join(HERE, "..", "..", "analysis")
MODEL_FILE = os.path.join(HERE, "..", "..", "inputs", "models", "tiny.toml")
STEPS, MICRO_BATCHES, STAGES, REPLICAS, SEQUENCES = 12, 4, 2, 2, 2
MODEL = {}  # the model file's [model] table
COVERAGE = 0.05
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
    return condition


def run(command, with_stderr=False):
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"FAILED (exit {done.returncode}): {' '.join(command)}\n{done.stdout}\n{done.stderr}")
    return (done.stdout, done.stderr) if with_stderr else done.stdout


def train(geotrain, config, path, mpirun, steps, ranks):
    args = [geotrain, "train", config, f"--train.steps={steps}", "--train.log_every_steps=1", "--train.log_json=true",
            "--optimizer.warmup_steps=2", "--train.eval_every_steps=0", "--train.eval_batches=2",
            f"--timing.file={path}", f"--train.gradient_accumulation={MICRO_BATCHES}",
            f"--train.micro_batch_sequences={SEQUENCES}", f"--model.file={MODEL_FILE}",
            f"--checkpoint.dir={path}.checkpoints", "--checkpoint.every_steps=5"]
    if ranks > 1:
        return run([*mpirun, "-n", str(ranks), *args, f"--pipeline.stages={STAGES}"], with_stderr=True)
    return run([*args, "--pipeline.stages=1"], with_stderr=True)


def check_events_against_plan(f):
    e = {name: f["events"][name][()] for name in f["events"]}
    kinds = h5py.check_enum_dtype(f["events"]["kind"].dtype)
    devices = f["plan"]["devices"][()]
    check(devices.shape == (STAGES, REPLICAS), f"/plan/devices shape {devices.shape}")
    message_bytes = SEQUENCES * MODEL["sequence_length"] * MODEL["hidden"] * 4
    for stage in range(STAGES):
        for replica in range(REPLICAS):
            rank = int(devices[stage][replica])
            mine = e["rank"] == rank
            for name in ("forward", "backward"):
                count = int(np.sum(mine & (e["kind"] == kinds[name])))
                check(count == STEPS * MICRO_BATCHES, f"rank {rank}: {count} {name} events, expected {STEPS * MICRO_BATCHES}")
            sends = mine & (e["kind"] == kinds["send"]) & (e["micro_batch"] >= 0)
            expected_peers = set()
            if stage + 1 < STAGES:
                expected_peers.add(int(devices[stage + 1][replica]))
            if stage > 0:
                expected_peers.add(int(devices[stage - 1][replica]))
            check(set(e["peer"][sends].tolist()) == expected_peers,
                  f"rank {rank} (stage {stage}) sends to {set(e['peer'][sends].tolist())}, plan says {expected_peers}")
            sizes = set(e["bytes"][sends].tolist())
            check(sizes == {message_bytes}, f"rank {rank}: send sizes {sizes}, expected B*T*H*4 = {message_bytes}")
            receives = mine & (e["kind"] == kinds["recv"])
            check(set(e["peer"][receives].tolist()) == expected_peers, f"rank {rank} receives from the wrong ranks")
            # Each step's end: the gradient over the replicas, the tied
            # embedding (V x H floats) between the two stages, the norm and
            # the loss (two doubles), one event each.
            for step in np.unique(e["step"][mine]):
                sums = sorted(e["bytes"][mine & (e["step"] == step) & (e["kind"] == kinds["allreduce"])].tolist())
                tied = 4 * MODEL["vocabulary"] * MODEL["hidden"]
                check(len(sums) == 3 and sums[0] == 16 and sums[1] == tied and sums[2] > tied,
                      f"rank {rank}, step {step}: all-reduce events of {sums} bytes, expected 16, {tied} and the gradient")
    return e, kinds


def check_exchange_table(f):
    sys.path.insert(0, ANALYSIS)
    import geotrain_timing
    rows = geotrain_timing.data_parallel_exchanges(geotrain_timing.load(f.filename))
    devices = f["plan"]["devices"][()]
    latency, bandwidth = f["network"]["latency"][()], f["network"]["bandwidth"][()]
    check(len(rows) == STAGES, f"data_parallel_exchanges: {len(rows)} groups, expected {STAGES}")
    for row, group in zip(rows, devices):
        a, b = (int(r) for r in group)
        by_hand = max(latency[a, b] + row["bytes"] / bandwidth[a, b], latency[b, a] + row["bytes"] / bandwidth[b, a])
        check(abs(row["latency_bandwidth_s"] - by_hand) <= 1e-12 * by_hand,
              f"stage {row['stage']}: exchange estimate {row['latency_bandwidth_s']} vs {by_hand} by hand")
        check(0 <= row["measured_s"] < f["steps"]["wall_time"][()].max(),
              f"stage {row['stage']}: exchange measured {row['measured_s']} s")


def main():
    separator = sys.argv.index("--")
    geotrain, config, workdir = sys.argv[1:separator]
    mpirun = sys.argv[separator + 1:]
    with open(MODEL_FILE, "rb") as f:
        MODEL.update(tomllib.load(f)["model"])
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    job_file, alone_file = os.path.join(workdir, "job.h5"), os.path.join(workdir, "alone.h5")
    # train.log_json: JSON lines on stdout, the text (the breakdown) on stderr.
    stdout, stderr = train(geotrain, config, job_file, mpirun, STEPS, STAGES * REPLICAS)
    train(geotrain, config, alone_file, mpirun, 6, 1)

    dump = subprocess.run(["h5dump", "-H", job_file], capture_output=True, text=True)
    check(dump.returncode == 0 and 'DATASET "kind"' in dump.stdout and '"forward"' in dump.stdout
          and 'GROUP "plan"' in dump.stdout, "h5dump -H does not show /events/kind as an enum and /plan")

    records = [json.loads(line) for line in stdout.splitlines()]  # with train.log_json, nothing else
    progress = [r for r in records if r["event"] == "step"]
    end = [r for r in records if r["event"] == "end"]
    breakdown = re.search(r"time per step \(mean over \d+ ranks\): ([\d.]+) ms = compute ([\d.]+) \+ pipeline ([\d.]+) "
                          r"\+ gradient sync ([\d.]+) \+ optimizer ([\d.]+) ms", stderr)
    if not check(len(progress) == STEPS and breakdown, "progress lines or the closing breakdown missing"):
        sys.exit("FAILED:\n" + "\n".join(failures) + "\n" + stdout)

    with h5py.File(job_file, "r") as f:
        e, kinds = check_events_against_plan(f)
        check_exchange_table(f)
        loss = f["steps"]["loss"][()]
        wall_time = f["steps"]["wall_time"][()]
        check(np.allclose(loss, [p["loss"] for p in progress], rtol=1e-8, atol=0),  # printed with 9 digits
              "/steps/loss differs from the progress lines")
        check(np.allclose(1e3 * wall_time[0], [p["step_ms"] for p in progress], rtol=0, atol=2e-3),
              "/steps/wall_time of rank 0 differs from its progress lines")
        # Validations: before training and at the end (eval_every_steps = 0).
        check(list(f["validation"]["step"][()]) == [0, STEPS] and len(end) == 1
              and abs(f["validation"]["loss"][-1] - end[0]["final_validation_loss"]) <= 1e-8 * end[0]["final_validation_loss"],
              "/validation does not hold the run's validations")

    # Raw computations: coverage, and per-step compute and optimizer means.
    duration = e["end"] - e["start"]
    walls, steady = {}, e["step"] != e["step"].min()
    for rank in range(STAGES * REPLICAS):
        mine = e["rank"] == rank
        walls[rank] = e["end"][mine].max() - e["start"][mine].min()
        covered = duration[mine].sum()
        check(abs(walls[rank] - covered) <= COVERAGE * walls[rank],
              f"rank {rank}: events sum to {covered:.4f} s of {walls[rank]:.4f} s wall time (over {COVERAGE:.0%} apart)")
    ranks = STAGES * REPLICAS
    compute = duration[steady & np.isin(e["kind"], [kinds["forward"], kinds["backward"]])].sum() / ranks / (STEPS - 1)
    optimizer = duration[steady & (e["kind"] == kinds["optimizer"])].sum() / ranks / (STEPS - 1)
    for name, mine, theirs in (("compute", compute, float(breakdown.group(2))),
                               ("optimizer", optimizer, float(breakdown.group(5)))):
        check(abs(1e3 * mine - theirs) <= 0.05 * theirs + 0.05,
              f"{name} per step from events {1e3 * mine:.2f} ms, geotrain's breakdown {theirs:.2f} ms")

    # The report against the raw numbers.
    plots = os.path.join(workdir, "plots")
    report = json.loads(run([sys.executable, os.path.join(ANALYSIS, "timing_report.py"), job_file, "--json",
                             "--plots", plots]))
    for row in report["ranks"]:
        rank = row["rank"]
        check(abs(row["wall_s"] - walls[rank]) < 1e-9, f"report: rank {rank} wall {row['wall_s']} vs {walls[rank]}")
        parts = sum(row[f"{g}_s"] for g in ("compute", "communication", "idle", "optimizer", "other"))
        check(abs(parts + row["untracked_s"] - row["wall_s"]) < 1e-9, f"report: rank {rank}'s columns do not add up")
        check(abs(row["untracked_s"]) <= COVERAGE * row["wall_s"], f"report: rank {rank} leaves {row['untracked_s']} s untracked")
    report_compute = np.mean([r["compute_per_step_s"] for r in report["ranks"]])
    check(abs(report_compute - compute) < 1e-9, f"report compute {report_compute} vs raw {compute}")
    # Compute utilisation: the report's (from events) against the trainer's (its own clocks).
    trainer_utilisation = end[0]["compute_utilisation_mean"]
    check(0 < report["compute_utilisation_mean"] <= 1
          and abs(report["compute_utilisation_mean"] - trainer_utilisation) <= 0.05,
          f"compute utilisation: report {report['compute_utilisation_mean']:.3f}, trainer {trainer_utilisation:.3f}")
    # The job's period: when the last rank ends step 1, and the last step.
    first_done = max(wall_time[rank][0] for rank in range(ranks))
    last_done = max(sum(wall_time[rank]) for rank in range(ranks))
    measured = (last_done - first_done) / (STEPS - 1)
    check(abs(report["measured_iteration_s"] - measured) < 1e-12, "report: measured iteration time")
    check(report["predicted_iteration_s"] > 0, "report: no predicted iteration time")
    tokens_per_step = MODEL["sequence_length"] * SEQUENCES * MICRO_BATCHES * REPLICAS
    check(abs(report["tokens_per_s"] * measured - tokens_per_step) < 1e-6 * tokens_per_step,
          f"report: {report['tokens_per_s']} tokens/s x {measured} s is not {tokens_per_step} tokens per step")
    # A run's steps split in two phases (geotrain_timing.phase, for outer.synchronous_steps): the two
    # periods weighted by their steps give the whole run's, and over every step but the warm-up the
    # utilisation is the report's.
    sys.path.insert(0, ANALYSIS)
    import geotrain_timing
    timing = geotrain_timing.load(job_file)
    whole, before, after = (geotrain_timing.phase(timing, a, b) for a, b in ((2, STEPS), (2, 6), (7, STEPS)))
    check(abs(before["period_s"] * 5 + after["period_s"] * (STEPS - 6) - measured * (STEPS - 1)) < 1e-9
          and abs(whole["period_s"] - measured) < 1e-12, f"phases: periods {before}, {after} against {measured}")
    check(abs(whole["compute_utilisation_mean"] - report["compute_utilisation_mean"]) < 1e-9
          and 0 < after["compute_utilisation_min"] <= after["compute_utilisation_mean"] <= 1,
          f"phases: utilisation {whole} against the report's {report['compute_utilisation_mean']}")
    try:
        geotrain_timing.phase(timing, 1, STEPS)
        check(False, "phases: the warm-up step was accepted as a phase's first")
    except ValueError:
        pass
    text = run([sys.executable, os.path.join(ANALYSIS, "timing_report.py"), job_file])
    bad_step = subprocess.run([sys.executable, os.path.join(ANALYSIS, "timing_report.py"), job_file, "--step", "99",
                               "--plots", plots], capture_output=True, text=True)
    check(bad_step.returncode == 2 and "--step 99" in bad_step.stderr and "Traceback" not in bad_step.stderr,
          f"timing_report.py --step 99: exit {bad_step.returncode}, {bad_step.stderr[-300:]}")
    check("per stage" in text and "predicted" in text, "timing_report.py's table is missing its sections")

    compare = json.loads(run([sys.executable, os.path.join(ANALYSIS, "compare_runs.py"), job_file, alone_file,
                              "--json", "--plots", plots]))
    check(len(compare) == 2 and abs(compare[0]["measured_iteration_s"] - measured) < 1e-12,
          "compare_runs.py: rows do not match the report")

    import matplotlib.image
    for name in ("timeline", "network", "losses", "prediction"):
        path = os.path.join(plots, name + ".png")
        if check(os.path.exists(path), f"{path} not written"):
            with open(path, "rb") as png:
                check(png.read(8) == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG")
            image = matplotlib.image.imread(path)
            check(image.shape[0] > 200 and image.shape[1] > 300 and image.std() > 0.01, f"{path}: blank or tiny image")

    if failures:
        sys.exit("FAILED:\n" + "\n".join(failures))
    print(f"ok: {len(e['rank'])} events; per-rank coverage {min(1 - abs(r['untracked_s']) / r['wall_s'] for r in report['ranks']):.4f};"
          f" compute {1e3 * compute:.2f} ms/step (geotrain {breakdown.group(2)}); measured {1e3 * measured:.1f} ms,"
          f" predicted {1e3 * report['predicted_iteration_s']:.1f} ms")


if __name__ == "__main__":
    main()
