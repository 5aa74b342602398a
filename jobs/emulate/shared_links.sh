#!/usr/bin/env bash
# Contention on an emulated network: 8 ranks at 2 sites of 4 whose traffic to
# the other site shares one uplink (jobs/emulate/emulate.py enforces [sites]
# uplink_gbps), in two layouts:
#   dp8      1 stage x 8 replicas: the gradient sum crosses the sites (16 of
#            its 28 pairs), uplink 0.5 Gbit/s, one pair's rate
#   pp2-dp4  2 stages x 4 replicas, stage 0 at A and stage 1 at B: the four
#            replicas' activations stream A -> B (and gradients back) at once,
#            uplink 0.1 Gbit/s
# Every rank's NIC is emulated at its fastest link (2 Gbit/s), the rate
# geotrain assumes where a scenario gives none. Each layout four times, each
# in its own emulation:
#   shared          the uplink emulated, the planner told of it and of the NICs (the flow model predicts)
#   pair-only       the uplink emulated, the planner told nic_gbps = "unlimited" and no uplink (the pair-only model)
#   nics            no uplink, the planner told of the NICs (the flow model)
#   nics-pair-only  no uplink, the planner told "unlimited" (the pair-only model)
#   probed          the uplink emulated, the planner given what geotrain probe measured in it
#                   (pair rates, NICs, sites, uplinks: a user who probes before planning)
# Then analysis/network_model_report.py writes analysis/results/network_model.md.
# RATE_SCALE (default 1) multiplies every rate (links, NICs, uplinks), to see
# whether an error follows the emulator's packet rate (it writes
# runs/shared-links-xSCALE and network_model-xSCALE.md). Root; ~9 minutes on
# 2 cores at 1.
#
#   [RATE_SCALE=0.25] bash jobs/emulate/shared_links.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source jobs/emulate/run_emulated.sh
scale=${RATE_SCALE:-1}
rate() { python3 -c "print(round($1 * $scale, 6))"; }
start_experiment "runs/shared-links${RATE_SCALE:+-x$RATE_SCALE}" 10 "$@"
site_pair() {  # FILE UPLINK_GBPS (empty: none)
  cat >"$1" <<TOML
[sites]
names = ["A", "B"]
devices = [4, 4]
intra_latency_ms = 0.5
intra_bandwidth_gbps = $(rate 2)
inter_latency_ms = 10
inter_bandwidth_gbps = $(rate 0.5)
TOML
  [[ -z $2 ]] || echo "uplink_gbps = $(rate "$2")" >>"$1"
}
one_run() {  # NAME EMULATED_SCENARIO PLANNER_MATRIX STAGES [EMULATE OPTIONS]
  local name=$1 file=$2 matrix=$3 stages=$4
  shift 4
  echo "== $name"
  python3 jobs/emulate/emulate.py run "$file" "$@" --timeout 900 --traffic-out "$out/$name-traffic.json" -- \
    "$PWD/build/release/geotrain" train "$PWD/inputs/quickstart.toml" --pipeline.stages="$stages" \
    --model.file="$PWD/inputs/models/emulation.toml" --pipeline.placement=rank-order \
    --train.gradient_accumulation=$((stages == 1 ? 1 : 4)) --network.matrix="$PWD/$matrix" \
    --train.steps="$steps" --optimizer.warmup_steps=2 --train.log_every_steps=1 --train.eval_every_steps=0 \
    --train.eval_batches=1 --checkpoint.dir= --network.deadline_s=600 \
    --timing.file="$PWD/$out/$name.h5" 2>&1 | grep -E "^(plan|shared links|time per step|emulate:)" || true
  [[ -f $out/$name.h5 ]] || { echo "$0: $name wrote no timing file" >&2; exit 1; }
}
site_pair "$out/two-sites.toml" ""
for layout in "dp8 1 0.5" "pp2-dp4 2 0.1"; do
  read -r name stages uplink <<<"$layout"
  site_pair "$out/$name-uplink.toml" "$uplink"
  # The emulated matrix (written before the network comes up, so the first run reads it), then without the uplink.
  one_run "$name-shared" "$out/$name-uplink.toml" "$out/$name-matrix.toml" "$stages" --matrix-out "$out/$name-matrix.toml"
  sed '/^uplink_gbps/d' "$out/$name-matrix.toml" >"$out/$name-matrix-nics.toml"
  sed 's/^nic_gbps = .*/nic_gbps = "unlimited"/' "$out/$name-matrix-nics.toml" >"$out/$name-matrix-pair-only.toml"
  grep -q '^nic_gbps = "unlimited"' "$out/$name-matrix-pair-only.toml" || { echo "$0: no nic_gbps in the emulated matrix" >&2; exit 1; }
  one_run "$name-pair-only" "$out/$name-uplink.toml" "$out/$name-matrix-pair-only.toml" "$stages"
  echo "== $name-probe"
  python3 jobs/emulate/emulate.py run "$out/$name-uplink.toml" --timeout 900 -- "$PWD/build/release/geotrain" probe \
    --out "$PWD/$out/$name-probed.toml" --device none | grep -E "^(  sites|  uplink|  NIC|probed|emulate:)" || true
  one_run "$name-probed" "$out/$name-uplink.toml" "$out/$name-probed.toml" "$stages"
  one_run "$name-nics" "$out/two-sites.toml" "$out/$name-matrix-nics.toml" "$stages"
  one_run "$name-nics-pair-only" "$out/two-sites.toml" "$out/$name-matrix-pair-only.toml" "$stages"
done
for python in python3 /usr/bin/python3; do "$python" -c 'import h5py' 2>/dev/null && break; done
"$python" analysis/network_model_report.py "$out" analysis/results/network_model${RATE_SCALE:+-x$RATE_SCALE}.md
