#!/usr/bin/env python3
"""network.dp_exchange under mpirun: the hierarchical exchange trains exactly as the direct one.

4 ranks, 1 stage x 4 replicas, on tests/mpi/training/scenarios/nodes-2x2.toml (two sites of two
ranks): direct, hierarchical and auto must give every step's loss and the final validation loss
bit for bit alike (fp32 sums add by site, then across sites, whichever exchange runs them); the
start-up line says which exchange each stage's group runs. 2 stages x 2 replicas with the replicas
in different sites, the same. int8 gradients through the hierarchical exchange: the replicas stay
identical and the run learns. A scenario without sites with dp_exchange = "hierarchical" exits 2
with one line naming the key.

usage: check_dp_exchange.py GEOTRAIN CONFIG -- MPIRUN...
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "support"))
from conclude import conclude  # noqa: E402
from training_script import arguments_and_mpirun, short_run_flags, train_records  # noqa: E402

STEPS = 6
SITES = os.path.join(HERE, "scenarios", "nodes-2x2.toml")
NO_SITES = os.path.join(HERE, "..", "..", "..", "inputs", "scenarios", "asymmetric-4.toml")


def run(command):
    done = train_records(command, STEPS)
    chosen = re.search(r"^data-parallel sums \(network.dp_exchange = (\w+)\): ([a-z ]+) \(by stage\)", done.stderr, re.M)
    if not chosen:
        sys.exit(f"FAILED: no exchange line from {' '.join(command)}\n{done.stderr}")
    return done.losses + [done.end["final_validation_loss"]], chosen.group(2).split(), done.end


def main():
    (geotrain, config), mpirun = arguments_and_mpirun()
    common = [*mpirun, "-n", "4", geotrain, "train", *short_run_flags(config, STEPS, 2),
              f"--network.matrix={SITES}", "--pipeline.placement=rank-order", "--network.gradient_bucket_mb=0.0625"]
    failures = []
    for stages, accumulation in ((1, 1), (2, 2)):
        layout = [*common, f"--pipeline.stages={stages}", f"--train.gradient_accumulation={accumulation}"]
        runs = {scheme: run([*layout, f"--network.dp_exchange={scheme}"])
                for scheme in ("direct", "hierarchical", "auto")}
        for scheme, (losses, chosen, _) in runs.items():
            expected = [scheme] * stages if scheme != "auto" else chosen
            same = losses == runs["direct"][0]
            print(f"pp {stages}: {scheme:12s} ran {chosen}: losses {losses[0]:.6f} .. validation {losses[-1]:.6f}, "
                  f"{'bitwise equal to direct' if same else 'DIFFER from direct'}")
            if not same:
                failures.append(f"pp {stages} {scheme}: {losses} vs direct {runs['direct'][0]}")
            if chosen != expected or not set(chosen) <= {"direct", "hierarchical"}:
                failures.append(f"pp {stages} {scheme}: the start-up line says {chosen}")
    losses, _, end = run([*common, "--pipeline.stages=1", "--train.gradient_accumulation=1",
                          "--network.dp_exchange=hierarchical", "--compression.gradients=int8"])
    print(f"int8, hierarchical: losses {losses[0]:.4f} .. {losses[-2]:.4f}, replicas identical: "
          f"{end.get('replicas_identical')}")
    if end.get("replicas_identical") is not True or not losses[-2] < losses[0]:
        failures.append(f"int8 hierarchical: replicas_identical {end.get('replicas_identical')}, losses {losses}")
    bad = subprocess.run([*mpirun, "-n", "4", geotrain, "train", *short_run_flags(config, 2, 1),
                          f"--network.matrix={NO_SITES}", "--network.dp_exchange=hierarchical"],
                         capture_output=True, text=True, timeout=300)
    lines = [line for line in bad.stderr.splitlines() if "network.dp_exchange" in line]
    print(f"no sites, hierarchical: exit {bad.returncode}, {lines[:1]}")
    if bad.returncode != 2 or len(lines) != 1:
        failures.append(f"no sites: exit {bad.returncode}, stderr {bad.stderr.strip()[-400:]!r}")
    conclude(failures, "the exchanges train alike")


if __name__ == "__main__":
    main()
