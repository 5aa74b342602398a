#!/usr/bin/env bash
# One geotrain job across several clusters (sites) with mpirun: one hostfile
# per site, merged; TCP only between hosts, on the subnets and ports you
# open; remote launch by ssh (or any agent). --dry-run prints the merged
# hostfile, the firewall openings and the mpirun command without running.
#
#   bash jobs/sites/multi-site.sh --site zurich:zurich.hosts --site tokyo:tokyo.hosts \
#        --net 10.8.0.0/16 --ports 40000-40200 [--agent "ssh -p 2222"] [--prefix /opt/openmpi] \
#        [--ranks N] [--map-by node|slot] [--dry-run] [-- geotrain train CONFIG --key=value ...]
#
# The merged hostfile is kept as runs/multi-site-<time>.hosts (the dry run
# prints the command that uses it; run that command later as it stands).
#
# A site hostfile is Open MPI's: one "host slots=N" line per host (N ranks,
# usually its GPUs). Every host needs the same geotrain path (or --binary),
# the same Open MPI version, ssh without a password from the launching host,
# and the port range open between all hosts, both directions: mpirun's
# out-of-band channel and the MPI TCP transport both use it. geotrain then
# probes the links itself and plans around the slow ones.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
sites=() net="" ports="" agent="ssh" prefix="" ranks="" map_by="node" dry_run=0
binary="$repo/build/release/geotrain"
usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
fail() { [[ -n ${merged:-} ]] && rm -f "$merged"; echo "multi-site.sh: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --site) [[ $# -ge 2 ]] || usage 2 >&2; sites+=("$2"); shift 2 ;;
    --net) net=${2:?}; shift 2 ;;
    --ports) ports=${2:?}; shift 2 ;;
    --agent) agent=${2:?}; shift 2 ;;
    --prefix) prefix=${2:?}; shift 2 ;;
    --ranks) ranks=${2:?}; shift 2 ;;
    --map-by) map_by=${2:?}; shift 2 ;;
    --binary) binary=${2:?}; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; break ;;
    -h|--help) usage 0 ;;
    *) fail "unknown option '$1' (--help)" ;;
  esac
done
[[ ${#sites[@]} -ge 1 ]] || fail "no --site NAME:HOSTFILE given"
[[ $map_by == node || $map_by == slot ]] || fail "--map-by: node or slot, got '$map_by'"
port_min="" port_count=""
if [[ -n $ports ]]; then
  [[ $ports =~ ^([0-9]+)-([0-9]+)$ ]] || fail "--ports: MIN-MAX, got '$ports'"
  port_min=${BASH_REMATCH[1]}
  port_count=$((BASH_REMATCH[2] - BASH_REMATCH[1] + 1))
  ((port_min >= 1024 && port_count >= 2)) || fail "--ports: at least 2 ports above 1023, got '$ports'"
fi

mkdir -p "$repo/runs"
merged=$repo/runs/multi-site-$(date +%Y%m%d-%H%M%S)-$$.hosts
: >"$merged"
slots_total=0
for entry in "${sites[@]}"; do
  name=${entry%%:*} file=${entry#*:}
  [[ $name != "$entry" && -n $name ]] || fail "--site $entry: NAME:HOSTFILE expected"
  [[ -r $file ]] || fail "--site $name: $file: cannot read the hostfile"
  echo "# site $name ($file)" >>"$merged"
  while read -r host rest; do
    [[ -z $host || $host == \#* ]] && continue
    slots=1
    [[ $rest =~ slots=([0-9]+) ]] && slots=${BASH_REMATCH[1]}
    echo "$host slots=$slots" >>"$merged"
    slots_total=$((slots_total + slots))
  done <"$file"
done
((slots_total > 0)) || fail "the hostfiles list no hosts"
ranks=${ranks:-$slots_total}
[[ $ranks =~ ^[1-9][0-9]*$ ]] || fail "--ranks: a positive integer, got '$ranks'"
((ranks <= slots_total)) || fail "--ranks $ranks: more than the $slots_total slots the hostfiles list (add slots=N to the hosts)"
[[ $# -gt 0 ]] || set -- "$binary" train "$repo/inputs/quickstart.toml"

# Messages up to 16 MiB (activations, a small stage's gradient) go eagerly:
# between sites the default rendezvous costs a round trip per message.
command=(mpirun --hostfile "$merged" -n "$ranks" --map-by "$map_by"
         --mca pml ob1 --mca btl self,vader,tcp --mca plm_rsh_agent "$agent"
         --mca btl_tcp_eager_limit 16777216 --mca btl_tcp_rndv_eager_limit 16777216
         --mca btl_tcp_max_send_size 16777216
         -x OMP_NUM_THREADS -x LD_LIBRARY_PATH -x PATH)
[[ -n $net ]] && command+=(--mca btl_tcp_if_include "$net" --mca oob_tcp_if_include "$net")
[[ -n $ports ]] && command+=(--mca btl_tcp_port_min_v4 "$port_min" --mca btl_tcp_port_range_v4 "$port_count"
                             --mca oob_tcp_dynamic_ipv4_ports "$ports")
[[ -n $prefix ]] && command+=(--prefix "$prefix")
command+=("$@")

if [[ $dry_run == 1 ]]; then
  echo "# merged hostfile ($slots_total slots; $ranks ranks, mapped by $map_by):"
  cat "$merged"
  echo "# open between every pair of hosts, both directions: TCP ${ports:-any port (set --ports to narrow it)}"
  echo "#   on ${net:-every interface (set --net to pick the inter-site subnet)}; plus ssh (22) from this host"
  echo "# command:"
  printf '%q ' "${command[@]}"
  echo
  exit 0
fi
exec "${command[@]}"
