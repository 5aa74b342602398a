// The fluid bound (flow_sharing.hpp) of an exchange phase whose transfers
// are every ordered pair of some groups: the loads tallied pair by pair
// from the groups, with no transfer list. At 1,024 devices a direct sum's
// phase is a million transfers, and the layout search prices thousands.
#include <algorithm>

#include "all_pairs_loads.hpp"
#include "geotrain/plan/exchange_pattern.hpp"

namespace geotrain::plan {

std::vector<Transfer> phase_transfers(const ExchangePhase& phase) {
  std::vector<Transfer> transfers = phase.transfers;
  for (const AllPairs& group : phase.all_pairs) {
    for (int u : group.members) {
      for (int v : group.members) {
        if (u != v) transfers.push_back({u, v, group.bytes});
      }
    }
  }
  return transfers;
}

double phase_bound_s(const Network& net, const ExchangePhase& phase, bool with_latency) {
  if (!all_pairs::disjoint(net, phase)) return fluid_bound_s(net, phase_transfers(phase), with_latency);
  // As fluid_bound_s: the last byte through a resource leaves it no sooner
  // than its load at its capacity and arrives one latency (its smallest) later.
  double any_bytes = 0, slowest_latency = 0, end = 0;
  all_pairs::for_each_resource(net, phase, [&](const all_pairs::Load& load, double capacity) {
    any_bytes += load.bytes, slowest_latency = std::max(slowest_latency, load.latency);
    end = std::max(end, load.bytes / capacity + (with_latency ? load.latency : 0.0));
  });
  if (any_bytes == 0) return with_latency ? slowest_latency : 0.0;
  return end;
}

}  // namespace geotrain::plan
