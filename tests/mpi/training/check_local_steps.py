#!/usr/bin/env python3
"""Local steps (outer.local_steps, DiLoCo) under mpirun.

1. Exactness: with H = 1, outer learning rate 1, no momentum, fp32 and plain
   SGD inside (linear in the gradient; AdamW is not, so no exact claim holds
   for it), every step's validation loss equals the single-rank synchronous
   run's within 1e-5, on 1x2 and 2x2 (pp x dp).
2. Replicas agree after each outer step: H = 2, one fragment, a checkpoint
   after every outer step; each replica's own parameters (saved per rank)
   are bitwise equal across replicas in every checkpoint, and differ between
   outer steps (a checkpoint after an odd step), which shows the
   check can fail.
3. The fragment schedule printed for H = 4, F = 3 equals the hand-computed
   one (offsets floor(f H / F) = 0, 1, 2).
4. Resume is bit-exact: H = 2, F = 2 (a fragment's exchange in flight at the
   step-3 checkpoint), resumed from step 3 to 6: steps 4-6 losses and the
   final validation equal the uninterrupted run's bit for bit; the same
   checkpoint resumes on another layout (1x2) with a note.
5. Sites (outer.sync_within_site): four replicas in one site sum every step,
   so with outer rate 1 and no momentum the run is synchronous AdamW
   training (validation within 1e-5 of the single rank); in two sites of two
   (inputs/scenarios/tiny-2x2.toml), the replicas of a site agree after
   every step and all four only after outer steps.
6. Four replicas of two stages (the emulation's pipelines inside sites) with
   fragments streamed at int4: the two copies of the tied embedding (first
   and last stage) get the same outer step, bit for bit (the trainer fails
   otherwise: "the tied embedding's two copies diverged"), and the replicas
   agree at the end. With 4 fragments the encoded sum's shards are smaller
   than the embedding, so the two ends would cut and scale it differently
   were it summed with the rest of its fragment.
7. A synchronous start (outer.synchronous_steps = 2), 2 x 2 with int8
   gradients in buckets: steps 1-2 equal synchronous training's bit for bit;
   steps 3-6 equal a resume, with local steps, of the synchronous run's
   step-2 checkpoint (its error feedback restarts at zero there, so the
   buckets' residuals must not leak into the fragments' exchange); and the
   run resumed from its own step-1, -2 and -3 checkpoints ends the same (no
   "not bit-exact" note); with S = 3 the fragment in flight after step 4 is
   fragment 1 (the schedule counts from the start of local steps).

usage: check_local_steps.py GEOTRAIN CONFIG -- MPIRUN...   (a Python with h5py)
"""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from conclude import conclude  # noqa: E402
from training_script import arguments_and_mpirun, short_fixture, short_run_flags, train_records  # noqa: E402

TOLERANCE = 1e-5
STEPS = 6
MICRO_BATCHES = 4  # global, per step


def run(command, cwd):
    done = train_records(command, cwd=cwd)
    return done.records, done.stderr


def losses(records, event, key):
    return [r[key] for r in records if r["event"] == event]


def replica_parameters(folder):
    """{stage layers: {replica: digest}} of every rank's own saved parameters."""
    import hashlib
    import h5py
    by_stage = {}
    for name in sorted(os.listdir(folder)):
        if not name.startswith("rank_"):
            continue
        with h5py.File(os.path.join(folder, name)) as f:
            for key in f.get("error_feedback", {}):
                if key.endswith("local_steps.params"):
                    stage, replica = key.split(".")[:2]
                    by_stage.setdefault(stage, {})[replica] = hashlib.sha256(f["error_feedback"][key][()].tobytes()).hexdigest()
    return by_stage


def in_flight(folder):
    """The outer exchanges in flight in a sharded checkpoint: {"pending_<f>", ...}."""
    import h5py
    found = set()
    for name in os.listdir(folder):
        if name.startswith("rank_"):
            with h5py.File(os.path.join(folder, name)) as f:
                found |= {key.rsplit(".", 1)[1] for key in f.get("error_feedback", {}) if ".local_steps.pending_" in key}
    return found


def checkpoint_at(folder, step):
    """The default form under mpirun: one file (parallel HDF5), or a folder of shards without it."""
    path = os.path.join(folder, f"step_{step:08d}")
    return path if os.path.isdir(path) else path + ".h5"


def main():
    (geotrain, config), mpirun = arguments_and_mpirun()
    failures = []
    work = tempfile.mkdtemp(prefix="local-steps-")
    every_step = short_run_flags(config, STEPS, 2) + ["--train.eval_every_steps=1"]

    # 1. H = 1 with SGD equals synchronous training.
    sgd = ["--optimizer.kind=sgd", "--optimizer.learning_rate=0.5", "--optimizer.gradient_clip=0"]
    reference, _ = run([geotrain, "train", *every_step, *sgd, "--pipeline.stages=1",
                        f"--train.gradient_accumulation={MICRO_BATCHES}"], work)
    golden = losses(reference, "validation", "validation_loss")
    exact = ["--outer.local_steps=1", "--outer.learning_rate=1", "--outer.momentum=0"]
    for pp, dp in [(2, 2)] if short_fixture() else [(1, 2), (2, 2)]:
        records, _ = run([*mpirun, "-np", str(pp * dp), geotrain, "train", *every_step, *sgd, *exact,
                          f"--pipeline.stages={pp}", f"--train.gradient_accumulation={MICRO_BATCHES // dp}"], work)
        got = losses(records, "validation", "validation_loss")
        worst = max(abs(a - b) / abs(b) for a, b in zip(got, golden)) if len(got) == len(golden) else float("inf")
        print(f"H=1 sgd {pp}x{dp}: {len(got)} validations, worst relative difference {worst:.2e}")
        if worst > TOLERANCE:
            failures.append(f"H=1 {pp}x{dp}: validation losses {got} vs synchronous {golden}")

    # 2. Replicas agree after each outer step (and not between them).
    folder = os.path.join(work, "agree")
    run([*mpirun, "-np", "4", geotrain, "train", *short_run_flags(config, STEPS, 2), "--pipeline.stages=2",
         "--train.gradient_accumulation=2", "--outer.local_steps=2", f"--checkpoint.dir={folder}",
         "--checkpoint.every_steps=1", "--checkpoint.keep=10", "--checkpoint.form=sharded"], work)
    for step in range(1, STEPS + 1):
        by_stage = replica_parameters(os.path.join(folder, f"step_{step:08d}"))
        agree = all(len(set(d.values())) == 1 and len(d) == 2 for d in by_stage.values()) and len(by_stage) == 2
        expected = step % 2 == 0
        print(f"after step {step}: replicas {'agree' if agree else 'differ'} (outer step: {expected})")
        if agree != expected:
            failures.append(f"after step {step}: replicas {'agree' if agree else 'differ'}, expected the opposite")

    # 3. The fragment schedule, by hand: offsets 0, 1, 2 in rounds of 4.
    _, log = run([*mpirun, "-np", "2", geotrain, "train", *short_run_flags(config, 4, 1),
                  "--train.gradient_accumulation=1", "--outer.local_steps=4", "--outer.fragments=3"], work)
    schedule = "fragment 0 after steps 4, 8, 12; fragment 1 after steps 1, 5, 9; fragment 2 after steps 2, 6, 10"
    print("schedule printed:", "yes" if schedule in log else "NO")
    if schedule not in log:
        failures.append(f"the fragment schedule '{schedule}' is not in the log:\n{log}")

    # 4. Resume bit-exact with a fragment in flight; and on another layout.
    # Rank order: the same replica reports its own step losses in both runs.
    streamed = ["--pipeline.placement=rank-order", "--pipeline.stages=2", "--train.gradient_accumulation=2", "--outer.local_steps=2",
                "--outer.fragments=2", "--checkpoint.every_steps=3", "--checkpoint.keep=10"]
    whole, _ = run([*mpirun, "-np", "4", geotrain, "train", *short_run_flags(config, STEPS, 2), *streamed,
                    f"--checkpoint.dir={os.path.join(work, 'whole')}"], work)
    step3 = checkpoint_at(os.path.join(work, "whole"), 3)
    resumed, log = run([*mpirun, "-np", "4", geotrain, "train", *short_run_flags(config, STEPS, 2), *streamed,
                        f"--checkpoint.dir={os.path.join(work, 'resumed')}",
                        f"--checkpoint.resume={step3}"], work)
    tail, again = losses(whole, "step", "loss")[3:], losses(resumed, "step", "loss")
    final_whole, final_resumed = losses(whole, "end", "final_validation_loss"), losses(resumed, "end", "final_validation_loss")
    print(f"resume from step 3: losses {again} vs {tail}; final {final_resumed} vs {final_whole}")
    if again != tail or final_resumed != final_whole or not again:
        failures.append(f"resume not bit-exact: {again} / {final_resumed} vs {tail} / {final_whole}")
    elsewhere, log = run([*mpirun, "-np", "2", geotrain, "train", *short_run_flags(config, STEPS, 2),
                          "--pipeline.stages=1", "--train.gradient_accumulation=2", "--outer.local_steps=2",
                          "--outer.fragments=2", f"--checkpoint.dir={os.path.join(work, 'elsewhere')}",
                          f"--checkpoint.resume={step3}"], work)
    noted = "no local-steps state" in log
    print(f"resume on 1x2: {len(losses(elsewhere, 'step', 'loss'))} steps, note {'printed' if noted else 'MISSING'}")
    if len(losses(elsewhere, "step", "loss")) != STEPS - 3 or not noted:
        failures.append(f"resume on another layout: {elsewhere}\n{log}")

    # 5. Replicas of one site sum every step.
    one_site = os.path.join(work, "one-site.toml")
    with open(one_site, "w") as f:
        f.write("[network]\nlatency_ms = [[0,1,1,1],[1,0,1,1],[1,1,0,1],[1,1,1,0]]\n"
                "bandwidth_gbps = [[0,10,10,10],[10,0,10,10],[10,10,0,10],[10,10,10,0]]\n"
                'sites = ["A", "A", "A", "A"]\n')
    adamw = short_run_flags(config, STEPS, 4) + ["--train.eval_every_steps=1"]  # 4 batches: one per replica
    reference, _ = run([geotrain, "train", *adamw, "--pipeline.stages=1", f"--train.gradient_accumulation={MICRO_BATCHES}"], work)
    sites = ["--outer.local_steps=2", "--outer.learning_rate=1", "--outer.momentum=0", "--outer.sync_within_site=true",
             "--pipeline.stages=1", "--train.gradient_accumulation=1"]
    golden = losses(reference, "validation", "validation_loss")
    # The site's sum after the backward, and in buckets during it (0.25 MiB: several per stage).
    for bucket_mb in ("0", "0.25"):
        records, log = run([*mpirun, "-np", "4", geotrain, "train", *adamw, *sites, f"--network.matrix={one_site}",
                            f"--network.gradient_bucket_mb={bucket_mb}"], work)
        got = losses(records, "validation", "validation_loss")
        worst = max(abs(a - b) / abs(b) for a, b in zip(got, golden)) if len(got) == len(golden) else float("inf")
        print(f"one site of 4, H=2 AdamW, buckets of {bucket_mb} MiB: worst relative difference {worst:.2e} from synchronous")
        if worst > TOLERANCE or "sum every step within their site" not in log:
            failures.append(f"one site, buckets {bucket_mb} MiB: validation losses {got} vs synchronous {golden}\n{log}")
    folder = os.path.join(work, "sites")
    _, log = run([*mpirun, "-np", "4", geotrain, "train", *short_run_flags(config, 4, 2), *sites,
                  "--network.matrix=" + os.path.join(os.path.dirname(config), "scenarios", "tiny-2x2.toml"),
                  f"--checkpoint.dir={folder}", "--checkpoint.every_steps=1", "--checkpoint.keep=10",
                  "--checkpoint.form=sharded"], work)
    site_of_replica = {int(r): site for r, site in re.findall(r"^  pipeline (\d+): ranks \d+ \((\w+)\)$", log, re.M)}
    for step in range(1, 5):
        (digests,) = replica_parameters(os.path.join(folder, f"step_{step:08d}")).values()  # one stage
        by_site = {}
        for replica, digest in digests.items():
            by_site.setdefault(site_of_replica.get(int(replica.split("_")[1]), "?"), set()).add(digest)
        inside = sorted(by_site) == ["X", "Y"] and all(len(d) == 1 for d in by_site.values())
        everywhere = len(set(digests.values())) == 1
        print(f"two sites, after step {step}: within each site {'agree' if inside else 'DIFFER'}, "
              f"across sites {'agree' if everywhere else 'differ'}")
        if not inside or everywhere != (step % 2 == 0):
            failures.append(f"two sites after step {step}: {by_site}")

    # 6. Four replicas of two stages, fragments at int4: the tied copies stay one.
    records, _ = run([*mpirun, "-np", "8", geotrain, "train", *short_run_flags(config, 8, 1), "--pipeline.stages=2",
                      "--train.gradient_accumulation=1", "--outer.local_steps=4", "--outer.fragments=4",
                      "--compression.gradients=int4"], work)
    (end,) = [r for r in records if r["event"] == "end"] or [{}]
    print(f"2 stages x 4 replicas, F = 4 at int4: ended with replicas identical: {end.get('replicas_identical')}")
    if end.get("replicas_identical") is not True:
        failures.append(f"2x4 streamed int4: the end record {end}")

    # 7. Synchronous first, then local steps: as a resume of synchronous training.
    base = [*mpirun, "-np", "4", geotrain, "train", *short_run_flags(config, STEPS, 2), "--pipeline.placement=rank-order",
            "--pipeline.stages=2", "--train.gradient_accumulation=2", "--compression.gradients=int8",
            "--network.gradient_bucket_mb=0.25", "--checkpoint.every_steps=1", "--checkpoint.keep=10"]
    local = ["--outer.local_steps=2", "--outer.fragments=2"]
    started, log = run([*base, *local, "--outer.synchronous_steps=2", f"--checkpoint.dir={os.path.join(work, 'started')}"], work)
    printed = "local steps start after step 2" in log
    synchronous, _ = run([*base, f"--checkpoint.dir={os.path.join(work, 'synchronous')}"], work)
    switched, _ = run([*base, *local, f"--checkpoint.dir={os.path.join(work, 'switched')}",
                       f"--checkpoint.resume={checkpoint_at(os.path.join(work, 'synchronous'), 2)}"], work)
    got = losses(started, "step", "loss")
    first, rest = got[:2], got[2:]
    final = losses(started, "end", "final_validation_loss")
    print(f"synchronous start: steps 1-2 {first} vs synchronous {losses(synchronous, 'step', 'loss')[:2]}; "
          f"steps 3-6 {rest} vs the switched resume {losses(switched, 'step', 'loss')}; final {final} vs "
          f"{losses(switched, 'end', 'final_validation_loss')}; start {'printed' if printed else 'NOT printed'}")
    if first != losses(synchronous, "step", "loss")[:2] or len(first) != 2:
        failures.append(f"synchronous start: steps 1-2 {first} differ from synchronous training's")
    if rest != losses(switched, "step", "loss") or final != losses(switched, "end", "final_validation_loss") or not rest:
        failures.append(f"synchronous start: steps 3-6 {rest} / {final} differ from the resume with local steps "
                        f"{losses(switched, 'step', 'loss')} / {losses(switched, 'end', 'final_validation_loss')}")
    if not printed:
        failures.append(f"synchronous start: 'local steps start after step 2' not printed\n{log}")
    # A resume inside the synchronous start is a plain resume: under a sanitizer, the cases below take that path.
    if not short_fixture():
        again, again_log = run([*base, *local, "--outer.synchronous_steps=2", f"--checkpoint.dir={os.path.join(work, 'again')}",
                                f"--checkpoint.resume={checkpoint_at(os.path.join(work, 'started'), 1)}"], work)
        print(f"synchronous start resumed from step 1: {losses(again, 'step', 'loss')} vs {got[1:]}")
        if losses(again, "step", "loss") != got[1:] or losses(again, "end", "final_validation_loss") != final:
            failures.append(f"synchronous start resumed from step 1: {losses(again, 'step', 'loss')} vs {got[1:]}\n{again_log}")
    # Resumed where local steps start (step 2) and with a fragment in flight (step 3).
    for step in (2, 3):
        later, later_log = run([*base, *local, "--outer.synchronous_steps=2", f"--checkpoint.dir={os.path.join(work, f'later-{step}')}",
                                f"--checkpoint.resume={checkpoint_at(os.path.join(work, 'started'), step)}"], work)
        print(f"synchronous start resumed from step {step}: {losses(later, 'step', 'loss')} vs {got[step:]}")
        if (losses(later, "step", "loss") != got[step:] or losses(later, "end", "final_validation_loss") != final
                or "not bit-exact" in later_log):
            failures.append(f"synchronous start resumed from step {step}: {losses(later, 'step', 'loss')} vs "
                            f"{got[step:]}\n{later_log}")
    # The fragment schedule counts from the start of local steps: S = 3, H = 2, F = 2 sends fragment 1
    # after step 4 (4 - 3 = 1) and fragment 0 after step 5; counted from step 0 it would be the other way.
    folder = os.path.join(work, "offset")
    run([*base, *local, "--outer.synchronous_steps=3", f"--checkpoint.dir={folder}", "--checkpoint.form=sharded"], work)
    for step, expected in ((4, "pending_1"), (5, "pending_0")):
        found = in_flight(os.path.join(folder, f"step_{step:08d}"))
        print(f"S = 3: in flight after step {step}: {sorted(found)}")
        if found != {expected}:
            failures.append(f"S = 3: after step {step} the checkpoint holds {sorted(found)} in flight, expected {expected}")

    if failures:
        failures.append(f"(its runs are kept in {work})")
    else:
        shutil.rmtree(work)  # ten sharded checkpoints: most of a GiB per run
    conclude(failures, "local steps: exact at H = 1, replicas agree after outer steps, schedule, bit-exact resume, sites, "
                       "tied copies with 4 replicas, a synchronous start")


if __name__ == "__main__":
    main()
