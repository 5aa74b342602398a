#!/usr/bin/env python3
"""`geotrain plan CONFIG` and `geotrain simulate CONFIG` price what `geotrain train CONFIG` runs.

1. On the quickstart config alone (no network: plan.ranks ranks of one
   host, the count jobs/quickstart.sh starts), plan's JSON carries the
   layout the config file fixes, read here from the file itself:
   pipeline.stages stages x (ranks / stages) replicas,
   train.gradient_accumulation micro-batches of train.micro_batch_sequences;
   simulate prices the same placement (the same predicted step); --ranks N
   is plan.ranks = N.
2. With network.matrix (a 4-device scenario with two sites), the plan that
   `mpirun -n 4 geotrain train` prints (its placement, pipeline by pipeline)
   is the one `geotrain plan` prints for the same config and overrides.
3. Settings only a config holds need one: overrides without a config, and
   scenario flags beside a config, exit 2 naming the option.

usage: check_plan_config.py GEOTRAIN CONFIG SCENARIO -- MPIRUN...
"""
import json
import os
import re
import subprocess
import sys
import tomllib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from conclude import conclude  # noqa: E402
from training_script import arguments_and_mpirun, short_run_flags  # noqa: E402


def run(command):
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def pipelines(text):
    """The plan's lines as train and plan print them: (degrees line, [pipeline lines])."""
    head = re.search(r"^plan \(planned\): (\d+ stages x \d+ replicas)", text, re.M)
    return (head.group(1) if head else None), re.findall(r"^  pipeline \d+: ranks .*$", text, re.M)


def quickstart_ranks():
    """The rank count jobs/quickstart.sh starts by default (GEOTRAIN_RANKS unset)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "jobs", "quickstart.sh")
    with open(script) as f:
        found = re.search(r'ranks="\$\{GEOTRAIN_RANKS:-(\d+)\}"', f.read())
    return int(found.group(1)) if found else None


def check_layout_from_file(geotrain, config, failures):
    with open(config, "rb") as f:
        settings = tomllib.load(f)
    ranks, stages = settings["plan"]["ranks"], settings["pipeline"]["stages"]
    if os.path.basename(config) == "quickstart.toml" and ranks != quickstart_ranks():
        failures.append(f"{config}: plan.ranks = {ranks}, but jobs/quickstart.sh starts {quickstart_ranks()} ranks")
    expected = {"pp": stages, "dp": ranks // stages, "micro_batches": settings["train"]["gradient_accumulation"],
                "micro_batch_sequences": settings["train"]["micro_batch_sequences"], "devices": ranks}
    planned = run([geotrain, "plan", config, "--json"])
    simulated = run([geotrain, "simulate", config, "--json"])
    twice = run([geotrain, "plan", config, "--ranks", str(2 * ranks), "--json"])
    if planned.returncode != 0 or simulated.returncode != 0 or twice.returncode != 0:
        failures.append(f"plan/simulate CONFIG (--ranks {2 * ranks}): exit {planned.returncode}/"
                        f"{simulated.returncode}/{twice.returncode}\n{planned.stderr}{simulated.stderr}{twice.stderr}")
        return
    plan, sim = json.loads(planned.stdout), json.loads(simulated.stdout)
    got = {key: plan[key] for key in expected}
    print(f"plan {config}: {got}; predicted step {plan['predicted_iteration_s']:.6g} s")
    if got != expected:
        failures.append(f"plan CONFIG: layout {got}, the config says {expected}")
    if sorted(d for stage in plan["stages"] for d in stage) != list(range(ranks)):
        failures.append(f"plan CONFIG: the stages {plan['stages']} do not place each of the {ranks} ranks once")
    if sim["stages"] != plan["stages"] or sim["predicted_iteration_s"] != plan["predicted_iteration_s"]:
        failures.append(f"simulate CONFIG priced another placement or step: {sim['stages']} "
                        f"{sim['predicted_iteration_s']} vs plan's {plan['stages']} {plan['predicted_iteration_s']}")
    doubled = json.loads(twice.stdout)
    if (doubled["devices"], doubled["dp"]) != (2 * ranks, 2 * ranks // stages):
        failures.append(f"plan CONFIG --ranks {2 * ranks}: {doubled['devices']} devices, {doubled['dp']} replicas")


def check_plan_equals_train(geotrain, config, scenario, mpirun, failures):
    # int4 activations: the placement prices the wire train sends
    overrides = [f"--network.matrix={scenario}", "--pipeline.plan_candidates=300", "--compression.activations=int4"]
    planned = run([geotrain, "plan", config] + overrides)
    trained = run(mpirun + ["-n", "4", geotrain, "train"] + short_run_flags(config, 2, 1) + overrides
                  + ["--timing.file=", "--train.metrics_file="])
    if planned.returncode != 0 or trained.returncode != 0:
        failures.append(f"plan / train with network.matrix: exit {planned.returncode}/{trained.returncode}\n"
                        f"{planned.stdout}{planned.stderr[-2000:]}{trained.stderr[-3000:]}")
        return
    from_plan, from_train = pipelines(planned.stdout), pipelines(trained.stderr + trained.stdout)
    print(f"plan: {from_plan}\ntrain: {from_train}")
    if from_plan[0] is None or not from_plan[1] or from_plan != from_train:
        failures.append(f"plan CONFIG printed {from_plan}, train ran {from_train}")


def check_bad_input(geotrain, config, failures):
    cases = [([geotrain, "plan", "--train.steps=3"], r"command line: --train\.steps=3: unknown option"),
             ([geotrain, "plan", config, "--ranks", "4", "--pp", "2"], r"command line: --pp: with a config file"),
             ([geotrain, "simulate", config, "--ranks", "4", "--model", config], r"command line: --model: with a config"),
             ([geotrain, "plan", config, "--ranks", "3"], r"pipeline\.stages: 2 does not divide the 3 ranks"),
             ([geotrain, "plan", config, "--plan.ranks=0"], r"network\.matrix: is not set .*plan\.ranks"),
             ([geotrain, "plan", config, "--ranks", "4", "--train.stepz=3"], r"command line: train\.stepz: unknown key")]
    for command, pattern in cases:
        done = run(command)
        lines = done.stderr.strip().splitlines()
        if done.returncode != 2 or len(lines) != 1 or not re.search(pattern, lines[0]):
            failures.append(f"{' '.join(command[1:])}: expected exit 2 and one line matching {pattern!r}, "
                            f"got exit {done.returncode}: {done.stderr.strip()}")


def main():
    (geotrain, config, scenario), mpirun = arguments_and_mpirun()
    failures = []
    check_layout_from_file(geotrain, config, failures)
    check_plan_equals_train(geotrain, config, scenario, mpirun, failures)
    check_bad_input(geotrain, config, failures)
    conclude(failures, "plan and simulate CONFIG price the layout and placement train runs")


if __name__ == "__main__":
    main()
