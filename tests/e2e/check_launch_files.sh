#!/usr/bin/env bash
# geotrain plan --out/--rankfile/--hostfile/--slurm-hostfile on a probed
# matrix whose ranks alternate between two hosts: each file puts rank r on
# the host of device r (expected lines written by hand below), the plan is
# computed once (one table on stdout, the same plan in the JSON), and a
# matrix that names no hosts is refused with exit 2.
# usage: check_launch_files.sh GEOTRAIN SCRATCH_DIR MATRIX_WITHOUT_HOSTS
set -euo pipefail
geotrain=$1 dir=$2 no_hosts=$3
rm -rf "$dir" && mkdir -p "$dir"
cat >"$dir/probed.toml" <<'TOML'
[network]
latency_ms = [[0, 5, 1, 5], [5, 0, 5, 1], [1, 5, 0, 5], [5, 1, 5, 0]]
bandwidth_gbps = [[0, 1, 10, 1], [1, 0, 1, 10], [10, 1, 0, 1], [1, 10, 1, 0]]
sites = ["alpha", "beta", "alpha", "beta"]
[workload]
pp = 2
dp = 2
TOML
"$geotrain" plan --scenario "$dir/probed.toml" --candidates 100 --no-baselines --out "$dir/plan.json" \
  --rankfile "$dir/rankfile" --hostfile "$dir/hostfile" --slurm-hostfile "$dir/slurm-hosts" >"$dir/table.txt"
fail() { echo "FAIL: $*"; exit 1; }
[[ $(grep -c "^Pipeline" "$dir/table.txt") == 1 ]] || fail "the table is not printed exactly once"
printf 'rank 0=alpha slot=0\nrank 1=beta slot=0\nrank 2=alpha slot=1\nrank 3=beta slot=1\n' | diff - "$dir/rankfile" \
  || fail "rankfile"
printf 'alpha slots=2\nbeta slots=2\n' | diff - "$dir/hostfile" || fail "hostfile"
printf 'alpha\nbeta\nalpha\nbeta\n' | diff - "$dir/slurm-hosts" || fail "slurm hostfile"
grep -q '"stages"' "$dir/plan.json" || fail "plan.json has no stages"
set +e
message=$("$geotrain" plan --scenario "$no_hosts" --pp 2 --candidates 50 --rankfile "$dir/x" 2>&1 >/dev/null)
code=$?
set -e
[[ $code == 2 ]] || fail "a matrix without hosts: exit $code, expected 2"
grep -q "network.sites: missing" <<<"$message" || fail "a matrix without hosts: '$message'"
[[ ! -e $dir/x ]] || fail "a rankfile was written for a matrix without hosts"
echo "ok: launch files put rank r on device r's host"
