#!/usr/bin/env python3
"""pipeline.layout = auto: the runtime trains the layout the search chooses.

The reference is one rank training the same global batch (16 sequences per
step) on an 8-layer tiny model. Under mpirun with 4 ranks:
  measured: emulation.compute_slowdown = [1, 1, 1, 4] (rank 3 acts as a
    device 4x slower; the ranks measure their speed), and
  typed: network.matrix names device types (three fast, rank 3 slow);
each must exit 0 on every rank, follow the single-rank losses within the
tolerance (the layout's stages, replicas, micro-batch size and uneven
split do not change the mathematics), and treat the slow rank as slow:
idle (its one line says why) or holding no more layers than any other
stage; `geotrain plan --layout auto --json`'s output, trained with
pipeline.plan_file, follows it and the same losses; the same with GPipe (the searched flush), and a fixed layout in
GPipe flushes of 2 micro-batches (4 a step). Bad input (a slowdown list of
the wrong length; a scenario whose
memory fits no layout) exits 2 on every rank with a line naming the key.
Tensor parallelism: on two sites of one 2-device node each, the search held
to 2-way units (pipeline.tensor_parallel = 2) and `geotrain plan --tp 2
--json` as a plan file follow the same losses.

usage: check_auto_layout.py GEOTRAIN CONFIG -- MPIRUN...
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from conclude import conclude  # noqa: E402
from training_script import arguments_and_mpirun, short_run_flags  # noqa: E402

TOLERANCE = 1e-5
STEPS = 8
SCENARIOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scenarios")


def run(command):
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def losses_of(done, what, failures):
    if done.returncode != 0:
        failures.append(f"{what}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        return None
    records = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    losses = [r["loss"] for r in records if r["event"] == "step"]
    final = [r["final_validation_loss"] for r in records if r["event"] == "end"]
    if len(losses) != STEPS or len(final) != 1:
        failures.append(f"{what}: expected {STEPS} step records and an end record\n{done.stdout[-2000:]}")
        return None
    return losses + final


def check_layout(done, what, slow_rank, failures):
    """The slow rank is idle (with its line) or holds no more layers than any stage."""
    text = done.stderr
    layout = re.search(r"^layout \(auto\): (\d+) stages x (\d+) replicas, (\d+) micro-batches of (\d+) sequences "
                       r"per replica(?: in flushes of \d+)?, layers \[([\d ]+)\]", text, re.M)
    if not layout:
        failures.append(f"{what}: no layout line\n{text[-3000:]}")
        return
    layers = [int(x) for x in layout.group(5).split()]
    pipelines = [[int(re.match(r"\s*(\d+)", hop).group(1)) for hop in line.split("->")]
                 for line in re.findall(r"^  pipeline \d+: ranks (.*)$", text, re.M)]
    idle_line = re.search(rf"geotrain: rank {slow_rank} \(host [^)]*\): idle: .*leaves this rank out", text)
    stage_of_slow = [chain.index(slow_rank) for chain in pipelines if slow_rank in chain]
    print(f"{what}: {layout.group(0)}; pipelines {pipelines}; rank {slow_rank} "
          f"{'idle' if idle_line else f'at stage {stage_of_slow}'}")
    if len(layers) != int(layout.group(1)) or sum(layers) != 8:
        failures.append(f"{what}: layers {layers} do not split 8 layers into {layout.group(1)} stages")
    if int(layout.group(2)) * int(layout.group(3)) * int(layout.group(4)) != 16:
        failures.append(f"{what}: the layout does not keep the global batch of 16 sequences: {layout.group(0)}")
    if idle_line:
        if stage_of_slow:
            failures.append(f"{what}: rank {slow_rank} says it is idle but is in a pipeline")
    elif not stage_of_slow:
        failures.append(f"{what}: rank {slow_rank} is in no pipeline and printed no idle line\n{text[-3000:]}")
    elif layers[stage_of_slow[0]] > min(layers):
        failures.append(f"{what}: the slow rank {slow_rank} holds {layers[stage_of_slow[0]]} layers, more than "
                        f"the fewest ({min(layers)}): {layers}")


def check_bad_input(command, expected, what, failures):
    done = run(command)
    lines = [line for line in done.stderr.splitlines() if line.startswith("geotrain: error:")]
    if done.returncode != 2 or not any(expected in line for line in lines):
        failures.append(f"{what}: expected exit 2 and an error line with '{expected}', got exit "
                        f"{done.returncode}\n{done.stderr[-2000:]}")
    else:
        print(f"{what}: exit 2, {lines[0]}")


def check_tensor_parallel(geotrain, common, auto, mpirun, reference, failures):
    """On two sites of one 2-device node each (nodes-2x2.toml): the search
    held to 2-way tensor-parallel units, and `geotrain plan --tp 2 --json`
    trained with pipeline.plan_file, both follow the single rank."""
    nodes = os.path.join(SCENARIOS, "nodes-2x2.toml")
    # tp = 2 of 4 ranks and 2 stages: 2 x 8 x 1 = 16 sequences per step, 4 x 2 x 1 = 8 evaluated.
    searched = run([*auto, f"--network.matrix={nodes}", "--pipeline.tensor_parallel=2",
                    "--train.gradient_accumulation=8", "--train.eval_batches=4"])
    plan_file = os.path.abspath("auto-layout-plan-tp.json")
    planned = run([geotrain, "plan", "--scenario", nodes, "--layout", "auto", "--tp", "2",
                   "--model", os.path.join(SCENARIOS, "tiny-8-layers.toml"), "--batch", "16", "--json"])
    if planned.returncode != 0:
        failures.append(f"geotrain plan --tp 2: exit {planned.returncode}\n{planned.stderr[-2000:]}")
        return
    with open(plan_file, "w") as f:
        f.write(planned.stdout)
    plan = json.loads(planned.stdout)
    if plan.get("tp") != 2 or len(plan.get("tensor_groups", [])) < 1:
        failures.append(f"geotrain plan --tp 2: no 2-way units in {planned.stdout[:500]}")
    from_file = run([*mpirun, "-n", "4", geotrain, "train", *common, f"--pipeline.plan_file={plan_file}"])
    for what, done in (("searched, tp = 2", searched), ("plan file, tp = 2", from_file)):
        values = losses_of(done, what, failures)
        if values is None:
            continue
        if not re.search(r"^layout \([^)]*\): 2-way tensor-parallel units x ", done.stderr, re.M):
            failures.append(f"{what}: the layout line names no 2-way units\n{done.stderr[-2000:]}")
        worst = max(abs(a - b) / abs(b) for a, b in zip(values, reference))
        print(f"{what}: largest relative difference to the single rank {worst:.2e} (tolerance {TOLERANCE})")
        if worst > TOLERANCE:
            failures.append(f"{what}: losses {values} differ from the single rank's {reference}")
    for idle in plan.get("idle_devices", []):
        if not re.search(rf"geotrain: rank {idle} \(host [^)]*\): idle: the plan in ", from_file.stderr):
            failures.append(f"plan file, tp = 2: rank {idle}, idle in the plan, printed no idle line")


def check_recorded_layout(timing_file, plan, plan_file, failures):
    """The timing file keeps the config as the user wrote it (attribute "config") and what ran beside it
    (attribute "layout": the plan file's stages, layers and micro-batches)."""
    import h5py
    import tomllib
    try:
        with h5py.File(timing_file) as f:
            config, layout = (tomllib.loads(f.attrs[name]) for name in ("config", "layout"))
    except (OSError, KeyError) as e:
        failures.append(f"{timing_file}: {e}")
        return
    written = {"stages": config["pipeline"]["stages"], "micro_batches": config["train"]["gradient_accumulation"],
               "plan_file": config["pipeline"]["plan_file"]}
    if written != {"stages": 2, "micro_batches": 4, "plan_file": plan_file}:
        failures.append(f"{timing_file}: attribute config holds {written}, not the settings as written")
    ran = {"stages": layout["layout"]["stages"], "layers_per_stage": layout["layout"]["layers_per_stage"],
           "micro_batches": layout["layout"]["micro_batches"], "source": layout["layout"]["source"]}
    expected = {"stages": plan["pp"], "layers_per_stage": plan["layers_per_stage"],
                "micro_batches": plan["micro_batches"], "source": plan_file}
    print(f"timing file: config as written {written}; layout that ran {ran}")
    if ran != expected:
        failures.append(f"{timing_file}: attribute layout holds {ran}, the plan file says {expected}")


def main():
    (geotrain, config), mpirun = arguments_and_mpirun()
    common = short_run_flags(config, STEPS, 2) + ["--model.layers=8", "--timing.file=", "--train.metrics_file="]
    failures = []
    # Validation: 4 batches of 2 sequences, the 8 the 4-rank runs evaluate
    # (the fixed layout's 2 batches x 2 sequences x 2 replicas, whatever the layout).
    reference = losses_of(run([geotrain, "train", *common, "--pipeline.stages=1", "--train.micro_batch_sequences=2",
                               "--train.gradient_accumulation=8", "--train.eval_batches=4"]), "single rank", failures)
    if reference is None:
        conclude(failures, "")
    print(f"single rank: losses {reference[0]:.6f} .. {reference[STEPS - 1]:.6f}, validation {reference[-1]:.6f}")
    # The fixed layout's batch: 2 sequences x 4 micro-batches x 4 ranks / 2 stages = 16.
    auto = [*mpirun, "-n", "4", geotrain, "train", *common, "--pipeline.layout=auto", "--pipeline.stages=2",
            "--train.micro_batch_sequences=2", "--train.gradient_accumulation=4"]
    # Two ranks, rank 1 three times slower: the fixed layout's batch is 2 x 8 x 2 / 2 = 16.
    pair = [*mpirun, "-n", "2", geotrain, "train", *common, "--pipeline.layout=auto", "--pipeline.stages=2",
            "--train.micro_batch_sequences=2", "--train.gradient_accumulation=8", "--train.eval_batches=4"]
    cases = {"measured": ([*auto, "--emulation.compute_slowdown=[1, 1, 1, 4]"], 3),
             "typed": ([*auto, f"--network.matrix={os.path.join(SCENARIOS, 'mixed-4.toml')}"], 3),
             "measured, 2 ranks": ([*pair, "--emulation.compute_slowdown=[1, 3]"], 1),
             # The searched GPipe flush, whatever it is, and a fixed one of 2 micro-batches (4 flushes a step).
             "measured, 2 ranks, GPipe": ([*pair, "--emulation.compute_slowdown=[1, 3]", "--pipeline.schedule=gpipe"], 1),
             "fixed, 2 ranks, GPipe flushes of 2": ([*pair[:pair.index("--pipeline.layout=auto")],
                                                     *pair[pair.index("--pipeline.layout=auto") + 1:],
                                                     "--pipeline.schedule=gpipe", "--pipeline.micro_batches_per_flush=2"],
                                                    None)}
    for what, (command, slow_rank) in cases.items():
        done = run(command)
        values = losses_of(done, what, failures)
        if values is None:
            continue
        if slow_rank is not None:
            check_layout(done, what, slow_rank, failures)
        elif "(4 flushes)" not in done.stderr:
            failures.append(f"{what}: the run does not say it takes 4 flushes\n{done.stderr[-2000:]}")
        worst = max(abs(a - b) / abs(b) for a, b in zip(values, reference))
        print(f"{what}: largest relative difference to the single rank {worst:.2e} (tolerance {TOLERANCE})")
        if worst > TOLERANCE:
            failures.append(f"{what}: losses {values} differ from the single rank's {reference}")
    # What `geotrain plan --layout auto --json` prints, trained as planned (pipeline.plan_file).
    plan_file = os.path.abspath("auto-layout-plan.json")
    planned = run([geotrain, "plan", "--scenario", os.path.join(SCENARIOS, "mixed-4.toml"), "--layout", "auto",
                   "--model", os.path.join(SCENARIOS, "tiny-8-layers.toml"), "--batch", "16", "--json"])
    if planned.returncode != 0:
        failures.append(f"geotrain plan: exit {planned.returncode}\n{planned.stderr[-2000:]}")
    else:
        with open(plan_file, "w") as f:
            f.write(planned.stdout)
        plan = json.loads(planned.stdout)
        timing_file = os.path.abspath("auto-layout-plan-timing.h5")
        done = run([*mpirun, "-n", "4", geotrain, "train", *common, f"--pipeline.plan_file={plan_file}",
                    f"--timing.file={timing_file}"])
        values = losses_of(done, "plan file", failures)
        check_recorded_layout(timing_file, plan, plan_file, failures)
        if values is not None:
            expected = (f"layers [{' '.join(map(str, plan['layers_per_stage']))}]", f"{plan['micro_batches']} micro-batches "
                        f"of {plan['micro_batch_sequences']} sequences")
            worst = max(abs(a - b) / abs(b) for a, b in zip(values, reference))
            print(f"plan file: {plan['pp']} x {plan['dp']}, {expected}, idle {plan['idle_devices']}; largest relative "
                  f"difference to the single rank {worst:.2e}")
            if worst > TOLERANCE or any(e not in done.stderr for e in expected):
                failures.append(f"plan file: losses {values} vs {reference}, or the run does not follow the plan "
                                f"{expected}\n{done.stderr[-2000:]}")
            for idle in plan["idle_devices"]:
                if not re.search(rf"geotrain: rank {idle} \(host [^)]*\): idle: the plan in ", done.stderr):
                    failures.append(f"plan file: rank {idle}, idle in the plan, printed no idle line")
        wrong = dict(plan, devices=5)
        with open(plan_file, "w") as f:
            json.dump(wrong, f)
        check_bad_input([*mpirun, "-n", "4", geotrain, "train", *common, f"--pipeline.plan_file={plan_file}"],
                        f"{plan_file}: devices: the plan is for 5 devices but the job has 4 ranks",
                        "plan file for another job", failures)
    check_tensor_parallel(geotrain, common, auto, mpirun, reference, failures)
    check_bad_input([*auto, "--emulation.compute_slowdown=[1, 1, 4]"],
                    "emulation.compute_slowdown: has 3 entries but the job has 4 ranks", "slowdown list too short",
                    failures)
    check_bad_input([*auto, f"--network.matrix={os.path.join(SCENARIOS, 'mixed-4-no-memory.toml')}"],
                    "pipeline.layout: auto: no layout fits in device memory", "no layout fits in memory", failures)
    conclude(failures, "auto layout: losses follow the single rank, the slow rank is treated as slow, bad input exits 2")


if __name__ == "__main__":
    main()
