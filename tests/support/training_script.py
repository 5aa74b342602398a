"""What the training check scripts share: their command line (arguments, then
"--" and the mpirun command) and the flags of a short, quiet training run."""
import os
import sys


def arguments_and_mpirun():
    separator = sys.argv.index("--")
    return sys.argv[1:separator], sys.argv[separator + 1:]


def fixture_flags():
    """The sanitizer presets (asan-mpi, tsan) set GEOTRAIN_TEST_FIXTURE=short: the same model, so the
    same parameters, buckets, fragments and checkpoint tensors, on sequences of 32 tokens instead of
    the config's 128: every code path the release run takes, a quarter of its arithmetic, which a
    sanitizer slows most. The numbers at full size are the release run's to check."""
    fixture = os.environ.get("GEOTRAIN_TEST_FIXTURE", "")
    if fixture not in ("", "short"):
        sys.exit(f"GEOTRAIN_TEST_FIXTURE={fixture}: unknown fixture (short, or unset for the config's own)")
    return ["--model.sequence_length=32"] if fixture == "short" else []


def short_fixture():
    """Under a sanitizer (the short fixture) a case whose C++ path another case of the same script
    already takes is left to the release run: a sanitizer checks paths, not numbers."""
    return bool(fixture_flags())


def short_run_flags(config, steps, eval_batches):
    """One JSON record per step on stdout, no evaluation during the run, no checkpoints."""
    return [config, *fixture_flags(), f"--train.steps={steps}", "--train.log_every_steps=1",
            "--train.log_json=true", "--optimizer.warmup_steps=2", "--train.eval_every_steps=0",
            f"--train.eval_batches={eval_batches}",
            "--checkpoint.dir="]  # no checkpoints: parallel tests share the working directory


def wait_for_exit(job, seconds):
    """(stdout, stderr, seconds it took) once `job` (a subprocess.Popen) exits;
    None when it still runs after `seconds`: a hang."""
    import subprocess
    import time
    start = time.monotonic()
    try:
        out, err = job.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None
    return out, err, time.monotonic() - start


class TrainingRun:
    """What a `geotrain train` run with train.log_json left: its JSON records (stdout holds nothing
    else), the step losses, the end record and the text on stderr."""

    def __init__(self, records, stderr):
        self.records, self.stderr = records, stderr
        self.losses = [r["loss"] for r in records if r["event"] == "step"]
        ends = [r for r in records if r["event"] == "end"]
        self.end = ends[0] if len(ends) == 1 else None


def train_records(command, steps=None, cwd=None, timeout=600):
    """Runs `command` (a geotrain train with train.log_json). Exits FAILED with the command and its
    output when it exits non-zero, or, given `steps`, when it did not log that many steps and one end."""
    import json
    import subprocess
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if done.returncode != 0:
        sys.exit(f"FAILED (exit {done.returncode}): {' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    run = TrainingRun([json.loads(line) for line in done.stdout.splitlines() if line.strip()], done.stderr)
    if steps is not None and (len(run.losses) != steps or run.end is None):
        sys.exit(f"FAILED: {len(run.losses)} step records and {'one' if run.end else 'no'} end record, "
                 f"expected {steps} and one, from {' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return run
