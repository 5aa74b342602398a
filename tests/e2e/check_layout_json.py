"""Checks `geotrain plan --layout auto --json` (issue 18's keys).

usage: check_layout_json.py JSON_FILE DEVICES LAYERS
Every key is there; the layers add up to the model's, one count per stage;
the used and idle devices partition 0..N-1 (with tensor parallelism tp > 1
the stages hold unit ids and tensor_groups[u] the tp devices of unit u);
every stage fits its memory.
"""
import json
import sys


def main():
    path, n, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with open(path) as f:
        plan = json.load(f)
    required = ["pp", "dp", "micro_batch_sequences", "micro_batches", "layers_per_stage", "idle_devices",
                "predicted_iteration_s", "memory_gib_per_stage", "memory_capacity_gib_per_stage", "stages",
                "layout_candidates", "cost_s", "tp", "tensor_groups"]
    missing = [k for k in required if k not in plan]
    assert not missing, f"missing keys {missing}"
    pp, dp = plan["pp"], plan["dp"]
    assert len(plan["layers_per_stage"]) == pp and sum(plan["layers_per_stage"]) == layers, plan["layers_per_stage"]
    assert len(plan["stages"]) == pp and all(len(s) == dp for s in plan["stages"])
    tp, groups = plan["tp"], plan["tensor_groups"]
    assert tp >= 1 and (tp == 1) == (len(groups) == 0), (tp, len(groups))
    assert all(len(g) == tp for g in groups), "a tensor group is not tp devices"
    units = [u for s in plan["stages"] for u in s]
    used = units if tp == 1 else [d for u in units for d in groups[u]]
    assert sorted(used + plan["idle_devices"]) == list(range(n)), "used + idle is not the devices"
    assert len(set(used)) == len(used), "a device is used twice"
    assert plan["micro_batches"] * plan["micro_batch_sequences"] * dp == plan["global_batch_sequences"]
    for need, have in zip(plan["memory_gib_per_stage"], plan["memory_capacity_gib_per_stage"]):
        assert have is None or need <= have, (need, have)
    assert plan["predicted_iteration_s"] > 0
    print(f"ok: tp {tp}, {pp} x {dp}, layers {plan['layers_per_stage']}, {plan['predicted_iteration_s']:.3f} s")


if __name__ == "__main__":
    main()
