#!/usr/bin/env python3
"""Several geotrain timing files side by side: a table (placement, measured
and predicted iteration time, tokens/s, final loss), the loss curves, and
the predicted against the measured iteration time.

usage: compare_runs.py RUN.h5 [RUN.h5 ...] [--plots DIR] [--json]

--plots DIR writes DIR/losses.png and DIR/prediction.png.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from requires import pyplot, save_figure  # noqa: E402
import geotrain_timing as gt  # noqa: E402


def label(run):
    a = run.attrs
    return f"{os.path.basename(run.path)}: {a['pipeline_stages']}x{a['data_parallel']} {a['placement']}"


def plot_losses(runs, path):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for run in runs:
        ax.plot(run.steps["step"], run.steps["loss"], label=label(run), linewidth=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats per token)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_prediction(runs, rows, path):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 5))
    measured = [1e3 * r["measured_iteration_s"] for r in rows]
    predicted = [1e3 * r["predicted_iteration_s"] for r in rows]
    ax.scatter(measured, predicted)
    for run, x, y in zip(runs, measured, predicted):
        ax.annotate(run.attrs["placement"], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    top = max(measured + predicted) * 1.1
    ax.plot([0, top], [0, top], color="grey", linewidth=0.8, label="prediction = measurement")
    ax.fill_between([0, top], [0, 0.8 * top], [0, 1.2 * top], color="grey", alpha=0.12, label="within 20%")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("measured iteration time (ms)")
    ax.set_ylabel("predicted iteration time (ms)")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timing_files", nargs="+")
    parser.add_argument("--plots", metavar="DIR")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs, rows = [], []
    for path in args.timing_files:
        try:
            run = gt.load(path)
        except (OSError, KeyError, ValueError) as error:
            sys.exit(f"compare_runs.py: {path}: {error}")
        summary = gt.summarize(run)
        runs.append(run)
        rows.append({"file": path, "placement": run.attrs["placement"], "ranks": run.ranks,
                     "measured_iteration_s": summary["measured_iteration_s"],
                     "predicted_iteration_s": summary["predicted_iteration_s"],
                     "prediction_error": summary["prediction_error"], "tokens_per_s": summary["tokens_per_s"],
                     "final_loss": float(run.steps["loss"][-1]) if len(run.steps["loss"]) else None})
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print("run                                    placement        measured ms  predicted ms  error   tokens/s  loss")
        for r in rows:
            error = f"{100 * r['prediction_error']:+5.1f}%" if r["prediction_error"] is not None else "   n/a"
            print(f"{os.path.basename(r['file'])[:38]:38s} {r['placement']:16s} {1e3 * r['measured_iteration_s']:11.2f} "
                  f"{1e3 * r['predicted_iteration_s']:13.2f} {error} {r['tokens_per_s']:10.0f}  {r['final_loss']:.4f}")
    if args.plots:
        os.makedirs(args.plots, exist_ok=True)
        plot_losses(runs, os.path.join(args.plots, "losses.png"))
        plot_prediction(runs, rows, os.path.join(args.plots, "prediction.png"))


if __name__ == "__main__":
    main()
