// What a data-parallel sum sends, as phases of transfers that run at once:
// the one description the simulator prices (flow_sharing.hpp) and counts
// bytes across sites from.
#pragma once
#include <vector>

#include "geotrain/plan/flow_sharing.hpp"
#include "geotrain/plan/simulator.hpp"

namespace geotrain::plan {

// Every ordered pair of `members` sends `bytes`: a direct sum's phase, kept
// in this form so that pricing it builds no list of d*(d-1) transfers (the
// layout search at 1,000+ devices prices millions of them).
struct AllPairs {
  std::vector<int> members;
  double bytes = 0;
};

struct ExchangePhase {
  std::vector<Transfer> transfers;  // all at once
  std::vector<AllPairs> all_pairs;  // at once with them; no device in two
  int repeat = 1;                   // the same phase this many times in a row
  // A chain pipelined in small chunks (central): every hop carries the whole
  // buffer at once and the hops' latencies add up.
  bool pipelined_chain = false;
};

// The phases of `scheme` summing `bytes` per member over `members`, in
// order. `paper` is priced by its own formula; its pattern is direct's.
std::vector<ExchangePhase> exchange_phases(const Network& network, const std::vector<int>& members, double bytes,
                                           DataParallelScheme scheme);

// `members` grouped by site, sites in order of their first member.
std::vector<std::vector<int>> members_by_site(const Network& network, const std::vector<int>& members);

// Everything the phase sends, all_pairs written out as transfers.
std::vector<Transfer> phase_transfers(const ExchangePhase& phase);
// fluid_bound_s of phase_transfers(phase), without writing them out where
// the phase is all_pairs alone.
double phase_bound_s(const Network& network, const ExchangePhase& phase, bool with_latency = true);

// Seconds for the phases on `network`, each after the one before.
double phases_s(const Network& network, const std::vector<ExchangePhase>& phases, bool with_latency = true);
// The phases' latencies alone: phases_s of the same transfers with no bytes.
double phases_latency_s(const Network& network, const std::vector<ExchangePhase>& phases);

}  // namespace geotrain::plan
