#!/usr/bin/env python3
"""Loss curves from geotrain metrics files (train.metrics_file: one JSON line
per step, validation and end of run), several runs on one plot.

usage: plot_metrics.py RUN.jsonl [RUN.jsonl ...] [--labels A,B,...] [--out loss.png] [--json]

Prints, per run, the steps, the last training loss (mean of the last 10
steps), the last validation loss, tokens/s and compute utilisation; --out
writes the training loss (thin) and validation loss (markers) against the
step; --json prints the table as JSON.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from requires import pyplot, require, save_figure  # noqa: E402


def read_metrics(path):
    """The records of one file by event; a bad line is an error naming it."""
    runs = {"step": {}, "validation": {}, "end": None}
    try:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    event = record["event"]
                except (ValueError, KeyError) as error:
                    raise ValueError(f"{path}: line {number}: not a geotrain metrics record ({error})") from None
                if event == "end":
                    runs["end"] = record
                elif event in ("step", "validation"):
                    runs[event][record["step"]] = record  # a resumed run appends: the latest wins
    except OSError as error:
        raise ValueError(f"{path}: {error.strerror}") from None
    if not runs["step"]:
        raise ValueError(f"{path}: no step records")
    return runs


def summary(label, runs):
    steps = sorted(runs["step"])
    tail = [runs["step"][s]["loss"] for s in steps[-10:] if runs["step"][s]["loss"] is not None]
    validation = sorted(runs["validation"])
    end = runs["end"] or {}
    return {"run": label, "steps": steps[-1], "train_loss_last10": sum(tail) / len(tail) if tail else None,
            "validation_loss": runs["validation"][validation[-1]]["validation_loss"] if validation else None,
            "tokens_per_s": end.get("tokens_per_s"),
            "compute_utilisation_mean": end.get("compute_utilisation_mean")}


def plot(curves, path):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for index, (label, runs) in enumerate(curves):
        colour = f"C{index}"
        steps = sorted(runs["step"])
        ax.plot(steps, [runs["step"][s]["loss"] for s in steps], color=colour, linewidth=0.8, alpha=0.6,
                label=f"{label} (training)")
        validation = sorted(runs["validation"])
        if validation:
            ax.plot(validation, [runs["validation"][s]["validation_loss"] for s in validation], color=colour,
                    marker="o", linewidth=1.5, label=f"{label} (validation)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", metavar="RUN.jsonl")
    parser.add_argument("--labels", help="comma-separated names of the runs (default: the file names)")
    parser.add_argument("--out", metavar="PNG", help="write the loss curves here")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    args = parser.parse_args()
    labels = args.labels.split(",") if args.labels else [os.path.basename(f) for f in args.files]
    if len(labels) != len(args.files):
        parser.error(f"--labels has {len(labels)} names for {len(args.files)} files")
    try:
        curves = [(label, read_metrics(path)) for label, path in zip(labels, args.files)]
    except ValueError as error:
        print(f"plot_metrics.py: {error}", file=sys.stderr)
        sys.exit(2)
    rows = [summary(label, runs) for label, runs in curves]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'run':30s} {'steps':>6s} {'train (last 10)':>16s} {'validation':>11s} {'tokens/s':>10s} {'util.':>6s}")
        for r in rows:
            def show(value, form):
                return format(value, form) if value is not None else "-"
            print(f"{r['run'][:30]:30s} {r['steps']:6d} {show(r['train_loss_last10'], '16.4f')} "
                  f"{show(r['validation_loss'], '11.4f')} {show(r['tokens_per_s'], '10.0f')} "
                  f"{show(r['compute_utilisation_mean'] and 100 * r['compute_utilisation_mean'], '5.1f')}%")
    if args.out:
        plot(curves, args.out)
        if not args.json:
            print(f"plot: {args.out}")


if __name__ == "__main__":
    main()
