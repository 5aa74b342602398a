#!/usr/bin/env bash
# The hierarchical data-parallel exchange (network.dp_exchange) against the
# flat one on emulated networks, whole models (1 stage) so that every rank is
# a replica and the gradient sum is all the traffic:
#   world-wide      Oregon, Virginia, Tokyo, London, 2 ranks each (8 replicas)
#   two-continents  Tokyo and London, 4 ranks each (8 replicas)
# both at the bandwidth x0.05 of the other emulation experiments, each in two
# forms: as the paper's scenario has it (every rank pair its own WAN path at
# the pair's rate: nic_gbps = "unlimited"), and "-uplink": each rank's NIC at
# its fastest link (geotrain's default) and each site's traffic to the others
# through one 1 Gbit/s uplink (x0.05), as a site's WAN connection is shared.
# Each network three times, --network.dp_exchange=direct, =hierarchical and
# =auto, the same seed and data: the losses must agree bit for bit (fp32 sums
# add in the same order whatever the exchange).
# Then analysis/hierarchical_exchange_report.py writes
# analysis/results/hierarchical_exchange.md. Root; ~16 minutes on 2 cores.
#
#   bash jobs/emulate/hierarchical_exchange.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source jobs/emulate/run_emulated.sh
start_experiment runs/hierarchical-exchange 10 "$@"
whole="--pipeline.stages=1 --train.gradient_accumulation=1 --train.micro_batch_sequences=2"
two_continents="--sites Tokyo,London --devices 4,4 --bandwidth-scale 0.05"
uplink_file=$out/world-wide-uplink.toml
sed 's/^nic_gbps = "unlimited"$/uplink_gbps = 1/' "$world_wide_file" >"$uplink_file"
grep -q '^uplink_gbps = 1$' "$uplink_file" || { echo "$0: $world_wide_file no longer says nic_gbps = \"unlimited\"" >&2; exit 1; }
for scheme in direct hierarchical auto; do
  # shellcheck disable=SC2086  # options are words
  run world-wide "$world_wide_file" "$world_wide_sites" rank-order 1f1b "-$scheme" $whole --network.dp_exchange=$scheme
  # shellcheck disable=SC2086
  run two-continents "$world_wide_file" "$two_continents" rank-order 1f1b "-$scheme" $whole --network.dp_exchange=$scheme
  # shellcheck disable=SC2086
  run world-wide-uplink "$uplink_file" "$world_wide_sites" rank-order 1f1b "-$scheme" $whole --network.dp_exchange=$scheme
  # shellcheck disable=SC2086
  run two-continents-uplink "$uplink_file" "$two_continents" rank-order 1f1b "-$scheme" $whole --network.dp_exchange=$scheme
done
for python in python3 /usr/bin/python3; do "$python" -c 'import h5py' 2>/dev/null && break; done
"$python" analysis/hierarchical_exchange_report.py "$out" analysis/results/hierarchical_exchange.md
