#!/usr/bin/env bash
# Contention on an emulated network: 8 replicas of one stage summing their
# gradient across 2 sites of 4 ranks whose traffic to the other site shares
# one uplink (jobs/emulate/emulate.py enforces [sites] uplink_gbps). The same
# job three times, each in its own emulation:
#   shared    the uplink emulated, the planner told of it (the flow model predicts)
#   pair-only the uplink emulated, the planner not told (the pair-only model predicts)
#   no-uplink nothing shared, the planner not told (the peer: what the pair-only
#             model describes, measured)
# Then analysis/network_model_report.py writes analysis/results/network_model.md.
# Root; ~5 minutes on 2 cores.
#
#   bash jobs/emulate/shared_links.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source jobs/emulate/run_emulated.sh
start_experiment runs/shared-links 5 "$@"
scenario=$out/two-sites-uplink.toml
# Pairs at 0.5 Gbit/s between sites, the same for all of a site's traffic out
# (and in): what one pair may use, the four ranks of a site share.
cat >"$scenario" <<TOML
[sites]
names = ["A", "B"]
devices = [4, 4]
intra_latency_ms = 0.5
intra_bandwidth_gbps = 2
inter_latency_ms = 10
inter_bandwidth_gbps = 0.5
uplink_gbps = 0.5
TOML
sed '/^uplink_gbps/d' "$scenario" >"$out/two-sites.toml"
one_run() {  # NAME EMULATED_SCENARIO PLANNER_MATRIX [EMULATE OPTIONS]
  local name=$1 file=$2 matrix=$3
  shift 3
  echo "== $name"
  python3 jobs/emulate/emulate.py run "$file" "$@" --timeout 900 --traffic-out "$out/$name-traffic.json" -- \
    "$PWD/build/release/geotrain" train "$PWD/inputs/quickstart.toml" --pipeline.stages=1 \
    --model.file="$PWD/inputs/models/emulation.toml" --pipeline.placement=rank-order \
    --train.gradient_accumulation=1 --network.matrix="$PWD/$matrix" \
    --train.steps="$steps" --optimizer.warmup_steps=2 --train.log_every_steps=1 --train.eval_every_steps=0 \
    --train.eval_batches=1 --checkpoint.dir= --network.deadline_s=600 \
    --timing.file="$PWD/$out/$name.h5" 2>&1 | grep -E "^(plan|shared links|time per step|emulate:)" || true
  [[ -f $out/$name.h5 ]] || { echo "$0: $name wrote no timing file" >&2; exit 1; }
}
# The emulated matrix (written before the network comes up, so the first run reads it), then the same without the uplink.
one_run shared "$scenario" "$out/matrix.toml" --matrix-out "$out/matrix.toml"
sed '/^uplink_gbps/d' "$out/matrix.toml" >"$out/matrix-pair-only.toml"
one_run pair-only "$scenario" "$out/matrix-pair-only.toml"
one_run no-uplink "$out/two-sites.toml" "$out/matrix-pair-only.toml"
for python in python3 /usr/bin/python3; do "$python" -c 'import h5py' 2>/dev/null && break; done
"$python" analysis/network_model_report.py "$out" analysis/results/network_model.md
