"""Reading geotrain timing files (HDF5; layout in docs/analysis.md, "Timing files")
and the numbers every report derives from them.

    run = load("runs/timing-1234.h5")
    run.events["kind"] == KIND["forward"]        # numpy columns, one row per event
    summarize(run)                                # per-rank and per-stage table, iteration times
"""
from dataclasses import dataclass, field

import os
import sys
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from requires import require  # noqa: E402

h5py, np = require("h5py", "numpy")

def wire_bytes_per_value(wire_format, group_size=64, topk_fraction=0.01):
    """Bytes on the wire per value in a long run of values, for a
    compression.* format (common/wire_bytes.hpp): int8 / int4 codes with one
    fp32 scale per group, top-k (uint32 index, fp32 value) pairs."""
    scale = 4 / group_size
    return {"fp32": 4.0, "int8": 1 + scale, "int4": 0.5 + scale, "topk": 8 * topk_fraction}[wire_format]


# Groups of event kinds in the report's columns.
COMPUTE = ("forward", "backward")
COMMUNICATION = ("send", "recv", "allreduce")
IDLE = ("idle",)
OPTIMIZER = ("optimizer",)
OTHER = ("data", "evaluate", "checkpoint")


@dataclass
class TimingRun:
    path: str
    attrs: dict
    events: dict            # column name -> numpy array
    kinds: dict             # kind name -> enum value
    steps: dict             # step, loss, learning_rate, grad_norm, wall_time [ranks, steps]
    latency: np.ndarray     # [ranks, ranks] s
    bandwidth: np.ndarray   # [ranks, ranks] bytes/s
    sites: list
    network_source: str
    plan: dict = field(default_factory=dict)  # stage_of_rank, replica_of_rank, devices, forward_s, backward_s + attrs

    @property
    def ranks(self):
        return int(self.attrs["ranks"])

    def kind_mask(self, names):
        return np.isin(self.events["kind"], [self.kinds[n] for n in names])


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def load(path):
    with h5py.File(path, "r") as f:
        if _text(f.attrs.get("format", "")) != "geotrain-timing":
            raise ValueError(f"{path}: not a geotrain timing file (attribute format)")
        if int(f.attrs["format_version"]) != 1:
            raise ValueError(f"{path}: format_version {int(f.attrs['format_version'])}: this script reads version 1")
        attrs = {k: (_text(v) if isinstance(v, (bytes, str)) else v.item() if hasattr(v, "item") else v)
                 for k, v in f.attrs.items()}
        events = {name: f["events"][name][()] for name in f["events"]}
        kinds = h5py.check_enum_dtype(f["events"]["kind"].dtype)
        steps = {name: f["steps"][name][()] for name in f["steps"]}
        plan = {name: f["plan"][name][()] for name in f["plan"]}
        plan.update({k: (_text(v) if isinstance(v, (bytes, str)) else float(v)) for k, v in f["plan"].attrs.items()})
        sites = [_text(s) for s in f["network"]["site"][()]]
        return TimingRun(path, attrs, events, kinds, steps, f["network"]["latency"][()],
                         f["network"]["bandwidth"][()], sites, _text(f["network"].attrs["source"]), plan)


def run_config(run):
    """The run's settings: its "config" attribute is TOML (dotted keys, one a line), read as TOML."""
    return tomllib.loads(run.attrs.get("config", ""))


def config_value(run, key, default=None):
    """One setting by its key ("outer.local_steps"), typed as the file wrote it; `default` when absent."""
    value = run_config(run)
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return default
        value = value[part]
    return value


def measured_iteration_s(run):
    """The job's step period: from the moment every rank has finished the
    first step (warm-up) to the moment every rank has finished the last,
    divided by the steps in between (evaluation and checkpoints left out).
    Ranks are not held together at each step's end (the end-of-step sums
    release each rank once its own inputs have arrived), so one rank's step
    times alternate around the period, and the slowest rank of each step
    would overstate it. One step: the slowest rank's."""
    wall = run.steps["wall_time"]  # [ranks, steps], every rank's clock from a common barrier
    if wall.shape[1] < 2:
        return float(wall.max())
    return _period(wall, 2, wall.shape[1])


def _period(wall, first, last):
    """The job's period over steps first..last (1-based, first >= 2): from every rank having finished
    step first - 1 to every rank having finished step last, over the steps."""
    ends = np.cumsum(wall, axis=1)
    return float((ends[:, last - 1].max() - ends[:, first - 2].max()) / (last - first + 1))


def phase(run, first, last):
    """Steps first..last (1-based, inclusive) of a run whose steps change
    character (outer.synchronous_steps: synchronous, then local steps): the
    job's period over them (as measured_iteration_s: from every rank having
    finished step first - 1 to every rank having finished step last, over
    the steps) and compute utilisation per rank (forward + backward time
    over the rank's own time in those steps), mean and least."""
    wall = run.steps["wall_time"]  # [ranks, steps]
    if not 2 <= first <= last <= wall.shape[1]:
        raise ValueError(f"{run.path}: steps {first}..{last}: the run records steps 1..{wall.shape[1]} "
                         "(step 1, the warm-up, has no period)")
    period = _period(wall, first, last)
    e = run.events
    chosen = run.kind_mask(COMPUTE) & (e["step"] >= first) & (e["step"] <= last)
    duration = e["end"] - e["start"]
    compute = [float(duration[chosen & (e["rank"] == rank)].sum()) for rank in range(wall.shape[0])]
    own = [float(wall[rank, first - 1:last].sum()) for rank in range(wall.shape[0])]
    utilisation = [c / w for c, w in zip(compute, own)]
    return {"first": first, "last": last, "period_s": period, "compute_utilisation_mean": float(np.mean(utilisation)),
            "compute_utilisation_min": float(min(utilisation)), "rank_compute_s": compute, "rank_wall_s": own}


def summarize(run):
    """Per rank: wall time of its recorded events (first start to last end)
    and the time in each group of kinds, as totals and per step; per stage:
    the means of its ranks; the run's measured and predicted iteration time."""
    e = run.events
    duration = e["end"] - e["start"]
    recorded_steps = np.unique(e["step"])
    first = recorded_steps.min() if len(recorded_steps) else 0
    steady = e["step"] != first  # per-step figures leave the warm-up step out
    steady_steps = max(len(recorded_steps) - 1, 1)
    groups = {"compute": COMPUTE, "communication": COMMUNICATION, "idle": IDLE, "optimizer": OPTIMIZER,
              "other": OTHER}
    stage_of_rank = run.plan["stage_of_rank"]
    rows = []
    for rank in range(run.ranks):
        mine = e["rank"] == rank
        row = {"rank": rank, "stage": int(stage_of_rank[rank]), "replica": int(run.plan["replica_of_rank"][rank]),
               "site": run.sites[rank] if rank < len(run.sites) else ""}
        if not mine.any():
            rows.append(row)
            continue
        row["wall_s"] = float(e["end"][mine].max() - e["start"][mine].min())
        tracked = 0.0
        for name, kinds in groups.items():
            chosen = mine & run.kind_mask(kinds)
            row[f"{name}_s"] = float(duration[chosen].sum())
            row[f"{name}_per_step_s"] = float(duration[chosen & steady].sum()) / steady_steps
            tracked += row[f"{name}_s"]
        row["untracked_s"] = row["wall_s"] - tracked
        # Compute utilisation as the trainer defines it: forward + backward
        # over the rank's step time, the warm-up step left out.
        walls = run.steps["wall_time"][rank] if rank < len(run.steps["wall_time"]) else []
        steady_wall = float(np.mean(walls[1:] if len(walls) > 1 else walls)) if len(walls) else 0.0
        row["compute_utilisation"] = row["compute_per_step_s"] / steady_wall if steady_wall > 0 else 0.0
        row["bytes_sent"] = int(e["bytes"][mine & run.kind_mask(("send",))].sum())
        rows.append(row)
    stages = []
    for stage in range(int(run.attrs["pipeline_stages"])):
        members = [r for r in rows if r["stage"] == stage and "wall_s" in r]
        entry = {"stage": stage, "ranks": [r["rank"] for r in members]}
        for key in ("compute_per_step_s", "communication_per_step_s", "idle_per_step_s", "optimizer_per_step_s",
                    "other_per_step_s"):
            entry[key] = float(np.mean([r[key] for r in members])) if members else 0.0
        stages.append(entry)
    measured = measured_iteration_s(run)
    predicted = float(run.plan.get("predicted_iteration_s", 0.0))
    tokens_per_s = float(run.attrs["tokens_per_step"]) / measured if measured > 0 else 0.0
    peak = float(run.attrs.get("device_peak_flops_per_s", 0.0))
    mfu = (float(run.attrs["model_flops_per_token"]) * tokens_per_s / (run.ranks * peak)) if peak > 0 else None
    utilisation = [(r["compute_utilisation"], r["rank"]) for r in rows if "compute_utilisation" in r]
    lowest = min(utilisation) if utilisation else (0.0, 0)
    return {"ranks": rows, "stages": stages, "recorded_steps": int(len(recorded_steps)),
            "compute_utilisation_mean": float(np.mean([u for u, _ in utilisation])) if utilisation else 0.0,
            "compute_utilisation_min": lowest[0], "compute_utilisation_min_rank": lowest[1],
            "measured_iteration_s": measured, "predicted_iteration_s": predicted,
            "prediction_error": (predicted - measured) / measured if measured > 0 and predicted > 0 else None,
            "predicted_bubble_fraction": float(run.plan.get("predicted_bubble_fraction", 0.0)),
            "tokens_per_s": tokens_per_s, "mfu": mfu}


def data_parallel_exchanges(run):
    """Per stage group: the median over steps (the first left out) of its
    gradient exchange, from the last member's start to the last member's end
    (so waiting for a late member is not counted), and what the link's
    latency and bandwidth give for it (2 members swap whole buffers; more
    exchange 1/D shards twice, every pair at once). Empty with one replica."""
    devices = run.plan["devices"]  # [stages, replicas]
    if devices.shape[1] < 2:
        return []
    e = run.events
    exchange = e["kind"] == run.kinds["allreduce"]
    steps = np.unique(e["step"][exchange])[1:]
    rows = []
    for stage, group in enumerate(devices):
        members = np.isin(e["rank"], group) & exchange
        # The gradient's exchange is each member's largest all-reduce of the step.
        gradient_bytes = int(e["bytes"][members].max())
        chosen = members & (e["bytes"] == gradient_bytes)
        measured = []
        for step in steps:
            mine = chosen & (e["step"] == step)
            if mine.sum() == len(group):
                measured.append(float(e["end"][mine].max() - e["start"][mine].max()))
        d = len(group)
        size = gradient_bytes if d == 2 else gradient_bytes / d
        slowest = max(run.latency[u, v] + size / run.bandwidth[u, v] for u in group for v in group if u != v)
        rows.append({"stage": stage, "ranks": [int(r) for r in group], "bytes": gradient_bytes,
                     "measured_s": float(np.median(measured)) if measured else float("nan"),
                     "latency_bandwidth_s": slowest if d == 2 else 2 * slowest})
    return rows


def router_cross_site_bytes(path):
    """Bytes the emulated router carried between ranks of different sites, from the JSON
    `jobs/emulate/emulate.py run --traffic-out` writes."""
    import json
    with open(path) as f:
        traffic = json.load(f)
    sites = traffic["sites"]
    return sum(b for a, row in enumerate(traffic["bytes"]) for c, b in enumerate(row) if sites[a] != sites[c])
