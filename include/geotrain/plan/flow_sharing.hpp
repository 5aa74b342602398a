// Transfers that run at once share what they cross. Each transfer is a flow
// through a set of resources (its pair link, the sender's and receiver's
// NICs, their sites' uplinks); every resource's capacity is divided max-min
// fairly among the flows crossing it (progressive filling), as flow-level
// network simulators such as SimGrid model TCP, and the rates are divided
// again each time a flow ends. On a network without shared capacities every
// flow is alone on its pair link: the pair-only alpha-beta model.
#pragma once
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
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

// A NIC rate from a fan-in (geotrain probe): flows of `bytes_each` at once
// into one device, each capped by its pair's rate (`pair_rates`, bytes/s),
// took `seconds` until the last byte. Returns the capacity C at which the
// flows, sharing C max-min fairly, take that long (bisection on the exact
// drain time); where they took no longer than their pair rates allow
// alone (within 5%), nothing was seen to bind and the sum of the pair
// rates is returned: the NIC carried at least that.
double fan_in_capacity(const std::vector<double>& pair_rates, double bytes_each, double seconds);

// The capacity of one more resource that every transfer crosses (what
// geotrain probe infers: a site's uplink when its ranks send at once, a
// NIC's receiving side in a fan-in) at which the flow model on `network`
// takes `seconds` to drain them, all starting at once (no latencies: the
// probe times the difference of two sizes). Bisection on the exact drain
// time. Infinity where they drained no slower than without it (within 5%):
// nothing was seen to bind.
double binding_capacity(const Network& network, const std::vector<Transfer>& transfers, double seconds);

// The resources `transfers` cross on `network` (network.hpp: SharedLinks).
FlowProblem flows_on(const Network& network, const std::vector<Transfer>& transfers);

// The resources of `network` as transfers cross them, numbered on first
// use: a transfer's pair link, its sender's NIC (out) and receiver's (in),
// and their sites' uplinks where it leaves a site. For callers that add
// flows over time (the stage groups' joint play) without renumbering.
class LinkResources {
 public:
  explicit LinkResources(const Network& network);
  std::vector<int> path(const Transfer& t);  // its resource ids, each at most once
  const std::vector<double>& capacities() const { return capacity_; }

 private:
  int once(int& id, double capacity);
  const Network& network_;
  std::vector<double> capacity_;
  std::unordered_map<long long, int> pair_;
  std::vector<int> nic_out_, nic_in_;
  std::map<std::string, std::pair<int, int>> uplink_;  // site -> (out, in)
};

// When each transfer has arrived, all starting together: its bytes drained
// under sharing, then its pair's latency.
std::vector<double> arrival_times_s(const Network& network, const std::vector<Transfer>& transfers);
// The last of them (0 for none).
double concurrent_transfers_s(const Network& network, const std::vector<Transfer>& transfers);

// The fluid bound of transfers that start together: no resource (pair link,
// NIC side, site uplink side) drains faster than its capacity, so the last
// of them arrives no sooner than max over resources of (bytes through it /
// capacity + the smallest latency of its transfers). Max-min sharing
// reaches it when the flows are symmetric (a ring, a direct sum over equal
// NICs; on the pair-only network it is the slowest transfer exactly) and
// can be slower otherwise; the gap on the exchange patterns geotrain uses:
// tests/unit/test_flow_sharing.cpp. O(transfers log transfers), where the
// progressive filling of a million flows (one phase of a direct sum over
// 1,024 devices) would take the layout search minutes.
// `with_latency` false: the loads over the capacities alone (what a transfer
// adds behind another on the same resources).
double fluid_bound_s(const Network& network, const std::vector<Transfer>& transfers, bool with_latency = true);

}  // namespace geotrain::plan
