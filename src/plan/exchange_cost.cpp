#include "geotrain/plan/exchange_cost.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace geotrain::plan {
namespace {

constexpr double kNone = std::numeric_limits<double>::infinity();

// A resource's bytes per byte summed and the smallest latency through it.
struct Load {
  double bytes = 0, latency = kNone;
  void add(double b, double l) { bytes += b, latency = std::min(latency, l); }
};

bool disjoint_all_pairs(const Network& net, const ExchangePhase& phase) {
  if (!phase.transfers.empty()) return false;
  std::vector<char> seen(static_cast<size_t>(net.device_count), 0);
  for (const AllPairs& group : phase.all_pairs) {
    for (int u : group.members) {
      if (seen[u]++) return false;
    }
  }
  return true;
}

}  // namespace

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

// The pairs of disjoint groups, tallied without a transfer list.
void ExchangeCost::add_all_pairs(const Network& net, const ExchangePhase& phase, Phase* into) const {
  const auto& nic = net.shared.nic_bytes_per_s;
  const auto& uplinks = net.shared.site_uplink_bytes_per_s;
  struct Site {
    const std::string* name;
    const double* capacity;  // null: no uplink given
    Load out, in;
  };
  std::vector<Site> sites;  // in order of first member
  auto site_index = [&](int device) {
    const std::string& name = net.site(device);
    for (size_t s = 0; s < sites.size(); ++s) {
      if (*sites[s].name == name) return static_cast<int>(s);
    }
    const auto it = uplinks.find(name);
    sites.push_back({&name, it == uplinks.end() ? nullptr : &it->second, {}, {}});
    return static_cast<int>(sites.size()) - 1;
  };
  for (const AllPairs& group : phase.all_pairs) {
    const size_t d = group.members.size();
    std::vector<int> site(d);
    for (size_t i = 0; i < d; ++i) site[i] = site_index(group.members[i]);
    std::vector<Load> in(d);
    for (size_t i = 0; i < d; ++i) {
      const int u = group.members[i];
      Load out;
      for (size_t j = 0; j < d; ++j) {
        if (j == i) continue;
        const int v = group.members[j];
        const double latency = net.latency(u, v);
        keep(&into->lines, {group.bytes / net.bandwidth(u, v), latency});
        out.add(group.bytes, latency), in[j].add(group.bytes, latency);
        if (site[i] != site[j]) {
          if (sites[site[i]].capacity) sites[site[i]].out.add(group.bytes, latency);
          if (sites[site[j]].capacity) sites[site[j]].in.add(group.bytes, latency);
        }
      }
      if (!nic.empty()) keep(&into->lines, {out.bytes / nic[u], out.latency});
    }
    for (size_t j = 0; j < d && !nic.empty(); ++j) keep(&into->lines, {in[j].bytes / nic[group.members[j]], in[j].latency});
  }
  for (const Site& s : sites) {
    for (const Load& load : {s.out, s.in}) {
      if (s.capacity && load.latency < kNone) keep(&into->lines, {load.bytes / *s.capacity, load.latency});
    }
  }
}

ExchangeCost::ExchangeCost(const Network& net, const std::vector<ExchangePhase>& phases) {
  for (const ExchangePhase& phase : phases) {
    if (phase.pipelined_chain) throw std::logic_error("ExchangeCost: a pipelined chain is not priced by its loads");
    Phase priced;
    priced.repeat = phase.repeat;
    if (disjoint_all_pairs(net, phase)) {
      add_all_pairs(net, phase, &priced);
    } else {
      // Every resource of the transfers' paths (LinkResources): its load and smallest latency.
      const std::vector<Transfer> transfers = phase_transfers(phase);
      const FlowProblem problem = flows_on(net, transfers);
      std::vector<Load> loads(problem.capacity.size());
      for (size_t f = 0; f < transfers.size(); ++f) {
        for (int r : problem.path[f]) loads[r].add(transfers[f].bytes, net.latency(transfers[f].from, transfers[f].to));
      }
      for (size_t r = 0; r < loads.size(); ++r) {
        if (loads[r].latency < kNone) keep(&priced.lines, {loads[r].bytes / problem.capacity[r], loads[r].latency});
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
