#!/usr/bin/env python3
"""Report on one geotrain timing file: where each rank's and each stage's
time went (compute, communication, idle = the pipeline bubble, optimizer,
other), tokens/s, MFU (with device.peak_tflops set), and the predicted
against the measured iteration time; optionally the plots.

usage: timing_report.py RUN.h5 [--json] [--plots DIR] [--step N]

--plots DIR writes DIR/timeline.png (Gantt of one step per rank) and
DIR/network.png (the matrix's latency and bandwidth, ranks ordered by stage,
each stage's data-parallel group outlined, pipeline links drawn).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from requires import pyplot, require, save_figure  # noqa: E402

np = require("numpy")
import geotrain_timing as gt  # noqa: E402

COLOURS = {"forward": "#4c72b0", "backward": "#55a868", "send": "#dd8452", "recv": "#c44e52", "idle": "#dddddd",
           "allreduce": "#8172b3", "optimizer": "#937860", "data": "#da8bc3", "evaluate": "#8c8c8c",
           "checkpoint": "#ccb974"}


def ms(seconds):
    return f"{1e3 * seconds:8.2f}"


def print_table(run, summary):
    a = run.attrs
    print(f"{run.path}: {a['model_name']}, {a['ranks']} ranks = {a['pipeline_stages']} stages x "
          f"{a['data_parallel']} replicas, {a['micro_batches']} micro-batches, {a['schedule']}, placement "
          f"{a['placement']}; network {run.network_source}; {summary['recorded_steps']} steps recorded")
    print(f"device: {a['device']}")
    print("\nper rank, ms per step (warm-up step left out); totals in s over the recorded steps")
    print(" rank stage replica  compute    comm.     idle   optim.    other |   wall s  untracked  util.")
    for r in summary["ranks"]:
        if "wall_s" not in r:
            print(f"{r['rank']:5d} {r['stage']:5d} {r['replica']:7d}  (no events)")
            continue
        print(f"{r['rank']:5d} {r['stage']:5d} {r['replica']:7d} {ms(r['compute_per_step_s'])} "
              f"{ms(r['communication_per_step_s'])} {ms(r['idle_per_step_s'])} {ms(r['optimizer_per_step_s'])} "
              f"{ms(r['other_per_step_s'])} | {r['wall_s']:8.3f} {100 * r['untracked_s'] / r['wall_s']:9.2f}% "
              f"{100 * r['compute_utilisation']:5.1f}%")
    print("\nper stage (mean of its ranks), ms per step")
    print("stage ranks          compute    comm.     idle   optim.    other")
    for s in summary["stages"]:
        print(f"{s['stage']:5d} {','.join(map(str, s['ranks'])):12s} {ms(s['compute_per_step_s'])} "
              f"{ms(s['communication_per_step_s'])} {ms(s['idle_per_step_s'])} {ms(s['optimizer_per_step_s'])} "
              f"{ms(s['other_per_step_s'])}")
    mfu = f"{100 * summary['mfu']:.1f}%" if summary["mfu"] is not None else "n/a (set device.peak_tflops)"
    print(f"\niteration: measured {ms(summary['measured_iteration_s'])} ms (the job's period), predicted "
          f"{ms(summary['predicted_iteration_s'])} ms", end="")
    if summary["prediction_error"] is not None:
        print(f" ({100 * summary['prediction_error']:+.1f}%)", end="")
    print(f"; predicted bubble {100 * summary['predicted_bubble_fraction']:.1f}%")
    print(f"throughput: {summary['tokens_per_s']:.0f} tokens/s, MFU {mfu}; compute utilisation "
          f"{100 * summary['compute_utilisation_mean']:.1f}% (mean over ranks; lowest "
          f"{100 * summary['compute_utilisation_min']:.1f}%, rank {summary['compute_utilisation_min_rank']})")


def default_step(run):
    """The recorded step whose slowest-rank time is the median (not the first)."""
    steps = run.steps["step"]
    wall = run.steps["wall_time"].max(axis=0)
    recorded = set(np.unique(run.events["step"]).tolist())
    candidates = [(wall[i], int(steps[i])) for i in range(len(steps)) if int(steps[i]) in recorded][1:]
    if not candidates:
        return int(run.events["step"].min())
    candidates.sort()
    return candidates[len(candidates) // 2][1]


def rank_order(run):
    """Ranks by (stage, replica): each data-parallel group is contiguous."""
    return sorted(range(run.ranks), key=lambda r: (run.plan["stage_of_rank"][r], run.plan["replica_of_rank"][r]))


def plot_timeline(run, step, path):
    plt = pyplot()
    e = run.events
    names = {v: k for k, v in run.kinds.items()}
    chosen = e["step"] == step
    t0 = e["start"][chosen].min()
    order = rank_order(run)
    fig, ax = plt.subplots(figsize=(11, 0.45 * run.ranks + 1.6))
    for row, rank in enumerate(order):
        mine = chosen & (e["rank"] == rank)
        for start, end, kind, micro in zip(e["start"][mine], e["end"][mine], e["kind"][mine], e["micro_batch"][mine]):
            name = names[int(kind)]
            ax.barh(row, 1e3 * (end - start), left=1e3 * (start - t0), color=COLOURS.get(name, "black"),
                    edgecolor="none", height=0.8)
            if name in ("forward", "backward") and (end - start) * 1e3 > 0.02 * ax.get_xlim()[1]:
                ax.text(1e3 * ((start + end) / 2 - t0), row, ("F" if name == "forward" else "B") + str(micro),
                        ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels([f"rank {r} (stage {run.plan['stage_of_rank'][r]}, replica {run.plan['replica_of_rank'][r]})"
                        for r in order], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms from the step's start")
    ax.set_title(f"step {step}: {run.attrs['pipeline_stages']} stages x {run.attrs['data_parallel']} replicas, "
                 f"{run.attrs['schedule']}, m = {run.attrs['micro_batches']}")
    present = sorted({names[int(k)] for k in e["kind"][chosen]}, key=list(COLOURS).index)
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=COLOURS[k]) for k in present], labels=present,
              loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=len(present), fontsize=8, frameon=False)
    save_figure(fig, path)


def plot_network(run, path):
    plt = pyplot()
    from matplotlib.colors import LogNorm
    order = rank_order(run)
    index = {r: i for i, r in enumerate(order)}
    labels = [f"{r}\n{run.sites[r]}" if run.sites[r] else str(r) for r in order]
    latency = run.latency[np.ix_(order, order)]
    finite = latency[np.isfinite(latency)]
    small = finite.size and finite.max() < 1e-3
    latency = latency * (1e6 if small else 1e3)
    bandwidth = run.bandwidth[np.ix_(order, order)] * 8 / 1e9
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.4))
    for ax, data, title, unit in ((axes[0], latency, "latency", "us" if small else "ms"),
                                  (axes[1], bandwidth, "bandwidth", "Gbit/s")):
        shown = np.where(np.isfinite(data) & (data > 0), data, np.nan)
        # Log colours: on a linear scale 1, 2 and 10 Gbit/s (or 1 and 50 ms) look alike.
        values = shown[np.isfinite(shown)]
        norm = LogNorm(vmin=values.min(), vmax=values.max()) if values.size and values.min() < values.max() else None
        image = ax.imshow(shown, cmap="viridis" if title == "bandwidth" else "magma_r", norm=norm)
        fig.colorbar(image, ax=ax, label=unit, shrink=0.8)
        ax.set_title(f"{title} ({os.path.basename(run.network_source)})")
        ax.set_xticks(range(len(order)))
        ax.set_yticks(range(len(order)))
        size = 7 if len(order) <= 8 else max(4, int(56 / len(order)))  # legible, not overlapping, at 12+ ranks
        ax.set_xticklabels(labels, fontsize=size, rotation=90 if len(order) > 8 else 0)
        ax.set_yticklabels(labels, fontsize=size)
        # Data-parallel groups: one block per stage.
        dp = int(run.attrs["data_parallel"])
        for stage in range(int(run.attrs["pipeline_stages"])):
            ax.add_patch(plt.Rectangle((stage * dp - 0.5, stage * dp - 0.5), dp, dp, fill=False, edgecolor="cyan",
                                       linewidth=2))
        # Pipeline links: stage s -> s+1 of each replica.
        devices = run.plan["devices"]
        for s in range(devices.shape[0] - 1):
            for r in range(devices.shape[1]):
                a, b = index[int(devices[s][r])], index[int(devices[s + 1][r])]
                ax.plot([b], [a], marker="o", markersize=6, markerfacecolor="none", markeredgecolor="red")
    fig.suptitle("cyan: data-parallel groups (one per stage); red circles: pipeline links (row sends to column)",
                 fontsize=9)
    save_figure(fig, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timing_file")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON instead of tables")
    parser.add_argument("--plots", metavar="DIR", help="write timeline.png and network.png into DIR")
    parser.add_argument("--step", type=int, help="the step of the timeline (default: the median step)")
    args = parser.parse_args()
    try:
        run = gt.load(args.timing_file)
    except (OSError, KeyError, ValueError) as error:
        sys.exit(f"timing_report.py: {args.timing_file}: {error}")
    summary = gt.summarize(run)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print_table(run, summary)
    if args.plots:
        os.makedirs(args.plots, exist_ok=True)
        step = args.step if args.step is not None else default_step(run)
        recorded = np.unique(run.events["step"])
        if step not in recorded:
            parser.error(f"--step {step}: {args.timing_file} has no events of that step (recorded: "
                         f"{', '.join(map(str, recorded.tolist())) or 'none'}; timing.max_event_steps limits them)")
        plot_timeline(run, step, os.path.join(args.plots, "timeline.png"))
        plot_network(run, os.path.join(args.plots, "network.png"))
        if not args.json:
            print(f"plots: {args.plots}/timeline.png (step {step}), {args.plots}/network.png")


if __name__ == "__main__":
    main()
