"""Checks `geotrain plan --json` output against the reference's numbers.

usage: check_plan_json.py JSON_FILE MAX_COST [N PP DP]
The cost must not exceed MAX_COST (the original scheduler's best, an
independent figure), the stages must partition 0..N-1 into PP groups of DP,
and the parts must add up.
"""
import json
import sys


def main():
    path, max_cost = sys.argv[1], float(sys.argv[2])
    n, pp, dp = (int(x) for x in sys.argv[3:6]) if len(sys.argv) > 3 else (64, 8, 8)
    with open(path) as f:
        plan = json.load(f)
    required = ["cost_s", "datap_cost_s", "pipeline_cost_s", "planner_seconds", "c_pp_bytes",
                "c_dp_bytes", "stages", "baselines", "tp", "tensor_groups"]
    missing = [k for k in required if k not in plan]
    assert not missing, f"missing keys {missing}"
    for k in ["rank_order_cost_s", "random_best_cost_s"]:
        assert k in plan["baselines"], f"missing baselines.{k}"
    # The DT-FM plan has no tensor parallelism: stage entries are devices.
    assert plan["tp"] == 1 and plan["tensor_groups"] == [], (plan["tp"], plan["tensor_groups"])
    stages = plan["stages"]
    assert len(stages) == pp, f"{len(stages)} stages, expected {pp}"
    assert all(len(s) == dp for s in stages), "a stage does not hold dp devices"
    devices = sorted(d for s in stages for d in s)
    assert devices == list(range(n)), "stages are not a partition of the devices"
    assert abs(plan["cost_s"] - plan["datap_cost_s"] - plan["pipeline_cost_s"]) < 1e-9
    assert plan["cost_s"] <= max_cost, f"cost {plan['cost_s']} > {max_cost}"
    assert plan["cost_s"] >= plan["lower_bound_s"] - 1e-9, "cost below the lower bound"
    assert plan["baselines"]["rank_order_cost_s"] >= plan["cost_s"] - 1e-9
    print(f"ok: cost {plan['cost_s']:.6f} <= {max_cost}")


if __name__ == "__main__":
    main()
