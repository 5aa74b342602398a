#include "geotrain/plan/exchange_cost.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "all_pairs_loads.hpp"

namespace geotrain::plan {
using all_pairs::Load;

void ExchangeCost::keep(std::vector<Line>* lines, Line line) {
  // The first line at least as steep: if it starts as high, it is above `line` everywhere.
  auto at = std::lower_bound(lines->begin(), lines->end(), line.per_byte,
                             [](const Line& l, double per_byte) { return l.per_byte < per_byte; });
  if (at != lines->end() && at->latency >= line.latency) return;
  if (at != lines->end() && at->per_byte == line.per_byte) at = lines->erase(at);
  // Lines less steep that start no higher are below it everywhere: a run just before `at`.
  auto from = at;
  while (from != lines->begin() && std::prev(from)->latency <= line.latency) --from;
  at = lines->erase(from, at);
  lines->insert(at, line);
}

ExchangeCost::ExchangeCost(const Network& net, const std::vector<ExchangePhase>& phases) {
  for (const ExchangePhase& phase : phases) {
    if (phase.pipelined_chain) throw std::logic_error("ExchangeCost: a pipelined chain is not priced by its loads");
    Phase priced;
    priced.repeat = phase.repeat;
    if (all_pairs::disjoint(net, phase)) {
      all_pairs::for_each_resource(net, phase, [&](const Load& load, double capacity) {
        keep(&priced.lines, {load.bytes / capacity, load.latency});
      });
    } else {
      // Every resource of the transfers' paths (LinkResources): its load and smallest latency.
      const std::vector<Transfer> transfers = phase_transfers(phase);
      const FlowProblem problem = flows_on(net, transfers);
      std::vector<Load> loads(problem.capacity.size());
      for (size_t f = 0; f < transfers.size(); ++f) {
        for (int r : problem.path[f]) loads[r].add(transfers[f].bytes, net.latency(transfers[f].from, transfers[f].to));
      }
      for (size_t r = 0; r < loads.size(); ++r) {
        if (loads[r].crossed()) keep(&priced.lines, {loads[r].bytes / problem.capacity[r], loads[r].latency});
      }
    }
    if (!priced.lines.empty()) phases_.push_back(std::move(priced));
  }
}

double ExchangeCost::seconds(double bytes) const {
  double total = 0;
  for (const Phase& phase : phases_) {
    double slowest = 0;
    for (const Line& line : phase.lines) slowest = std::max(slowest, bytes * line.per_byte + line.latency);
    total += phase.repeat * slowest;
  }
  return total;
}

double ExchangeCost::bytes_s(double bytes) const {
  double total = 0;
  for (const Phase& phase : phases_) total += phase.repeat * (bytes * phase.lines.back().per_byte);
  return total;
}

double ExchangeCost::latency_s() const {
  double total = 0;
  for (const Phase& phase : phases_) total += phase.repeat * phase.lines.front().latency;
  return total;
}

std::shared_ptr<const ExchangeCost> ExchangeCostCache::get(const Network& net, const std::vector<int>& members,
                                                           DataParallelScheme scheme) {
  auto key = std::make_pair(scheme, members);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = costs_.find(key); it != costs_.end()) return it->second;
  }
  auto cost = std::make_shared<const ExchangeCost>(net, exchange_phases(net, members, 1.0, scheme));
  std::lock_guard<std::mutex> lock(mutex_);
  if (costs_.size() >= capacity_) costs_.clear();
  costs_.emplace(std::move(key), cost);
  return cost;
}

}  // namespace geotrain::plan
