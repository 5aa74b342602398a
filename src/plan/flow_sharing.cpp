#include "geotrain/plan/flow_sharing.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

namespace geotrain::plan {
namespace {

constexpr double kUnlimited = std::numeric_limits<double>::infinity();

// flows_of[r]: the flows that cross resource r.
std::vector<std::vector<int>> flows_by_resource(const FlowProblem& problem) {
  std::vector<std::vector<int>> flows_of(problem.capacity.size());
  for (size_t f = 0; f < problem.path.size(); ++f) {
    for (int r : problem.path[f]) flows_of[r].push_back(static_cast<int>(f));
  }
  return flows_of;
}

}  // namespace

std::vector<double> max_min_rates(const FlowProblem& problem, const std::vector<char>& active) {
  const size_t flows = problem.path.size(), resources = problem.capacity.size();
  const auto flows_of = flows_by_resource(problem);
  std::vector<double> rate(flows, 0.0), left = problem.capacity;
  std::vector<char> fixed(flows, 0);
  std::vector<int> unfixed(resources, 0);
  for (size_t f = 0; f < flows; ++f) {
    if (!active.empty() && !active[f]) {
      fixed[f] = 1;
    } else if (problem.path[f].empty()) {
      rate[f] = kUnlimited, fixed[f] = 1;
    } else {
      for (int r : problem.path[f]) ++unfixed[r];
    }
  }
  // Progressive filling: the resource with the smallest fair share is the
  // bottleneck of all its unfixed flows; they get that share, and what they
  // take is gone from every other resource they cross.
  for (;;) {
    int bottleneck = -1;
    double share = kUnlimited;
    for (size_t r = 0; r < resources; ++r) {
      if (unfixed[r] == 0) continue;
      const double fair = std::max(left[r], 0.0) / unfixed[r];
      if (fair < share) share = fair, bottleneck = static_cast<int>(r);
    }
    if (bottleneck < 0) break;
    for (int f : flows_of[bottleneck]) {
      if (fixed[f]) continue;
      rate[f] = share, fixed[f] = 1;
      for (int r : problem.path[f]) left[r] -= share, --unfixed[r];
    }
  }
  return rate;
}

std::vector<double> drain_times_s(const FlowProblem& problem) {
  const size_t flows = problem.path.size();
  std::vector<double> finish(flows, 0.0), left = problem.bytes;
  std::vector<char> active(flows, 0);
  size_t running = 0;
  for (size_t f = 0; f < flows; ++f) {
    if (problem.bytes[f] > 0) active[f] = 1, ++running;
  }
  double now = 0;
  while (running > 0) {
    const auto rate = max_min_rates(problem, active);
    double step = kUnlimited;
    for (size_t f = 0; f < flows; ++f) {
      if (active[f]) step = std::min(step, rate[f] == kUnlimited ? 0.0 : left[f] / rate[f]);
    }
    now += step;
    // Flows within a rounding error of their end end now: equal flows end together.
    for (size_t f = 0; f < flows; ++f) {
      if (!active[f]) continue;
      left[f] = rate[f] == kUnlimited ? 0.0 : left[f] - rate[f] * step;
      if (left[f] <= problem.bytes[f] * 1e-12) active[f] = 0, finish[f] = now, --running;
    }
  }
  return finish;
}

FlowProblem flows_on(const Network& network, const std::vector<Transfer>& transfers) {
  FlowProblem problem;
  std::map<std::pair<int, long long>, int> id;  // (kind, which) -> resource
  auto resource = [&](int kind, long long which, double capacity) {
    auto [it, added] = id.try_emplace({kind, which}, static_cast<int>(problem.capacity.size()));
    if (added) problem.capacity.push_back(capacity);
    return it->second;
  };
  const SharedLinks& shared = network.shared;
  std::map<std::string, int> site_index;
  for (const auto& [site, capacity] : shared.site_uplink_bytes_per_s) site_index.emplace(site, site_index.size());
  const long long n = network.device_count;
  for (const Transfer& t : transfers) {
    std::vector<int> path{resource(0, t.from * n + t.to, network.bandwidth(t.from, t.to))};
    if (!shared.nic_bytes_per_s.empty()) {
      path.push_back(resource(1, t.from, shared.nic_bytes_per_s[t.from]));  // sending side
      path.push_back(resource(2, t.to, shared.nic_bytes_per_s[t.to]));      // receiving side
    }
    const std::string from_site = network.site(t.from), to_site = network.site(t.to);
    if (from_site != to_site) {
      if (auto it = shared.site_uplink_bytes_per_s.find(from_site); it != shared.site_uplink_bytes_per_s.end()) {
        path.push_back(resource(3, site_index[from_site], it->second));
      }
      if (auto it = shared.site_uplink_bytes_per_s.find(to_site); it != shared.site_uplink_bytes_per_s.end()) {
        path.push_back(resource(4, site_index[to_site], it->second));
      }
    }
    problem.path.push_back(std::move(path));
    problem.bytes.push_back(t.bytes);
  }
  return problem;
}

std::vector<double> arrival_times_s(const Network& network, const std::vector<Transfer>& transfers) {
  auto arrival = drain_times_s(flows_on(network, transfers));
  for (size_t k = 0; k < transfers.size(); ++k) arrival[k] += network.latency(transfers[k].from, transfers[k].to);
  return arrival;
}

double concurrent_transfers_s(const Network& network, const std::vector<Transfer>& transfers) {
  const auto arrival = arrival_times_s(network, transfers);
  return arrival.empty() ? 0.0 : *std::max_element(arrival.begin(), arrival.end());
}

}  // namespace geotrain::plan
