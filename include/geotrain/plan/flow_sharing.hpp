// Transfers that run at once share what they cross. Each transfer is a flow
// through a set of resources (its pair link, the sender's and receiver's
// NICs, their sites' uplinks); every resource's capacity is divided max-min
// fairly among the flows crossing it (progressive filling), as flow-level
// network simulators such as SimGrid model TCP, and the rates are divided
// again each time a flow ends. On a network without shared capacities every
// flow is alone on its pair link: the pair-only alpha-beta model.
#pragma once
#include <vector>

#include "geotrain/plan/network.hpp"

namespace geotrain::plan {

// The abstract form: capacities in bytes/s (finite and > 0), each flow the
// resources it crosses. A flow that crosses none is unlimited.
struct FlowProblem {
  std::vector<double> capacity;
  std::vector<std::vector<int>> path;  // per flow: resource ids, each at most once
  std::vector<double> bytes;           // per flow
};

// The max-min fair rates (bytes/s) of the flows with active[f] set (all
// when `active` is empty); inactive flows get 0, unlimited ones infinity.
std::vector<double> max_min_rates(const FlowProblem& problem, const std::vector<char>& active = {});

// When each flow has sent its last byte, all starting at time 0 and the
// rates recomputed each time one ends (seconds).
std::vector<double> drain_times_s(const FlowProblem& problem);

// One transfer of `bytes` from device `from` to device `to`.
struct Transfer {
  int from = 0, to = 0;
  double bytes = 0;
};

// The resources `transfers` cross on `network` (network.hpp: SharedLinks).
FlowProblem flows_on(const Network& network, const std::vector<Transfer>& transfers);

// When each transfer has arrived, all starting together: its bytes drained
// under sharing, then its pair's latency.
std::vector<double> arrival_times_s(const Network& network, const std::vector<Transfer>& transfers);
// The last of them (0 for none).
double concurrent_transfers_s(const Network& network, const std::vector<Transfer>& transfers);

}  // namespace geotrain::plan
