#include "geotrain/plan/flow_sharing.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
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
  // A resource only one flow crosses (its pair link, mostly) is a cap of
  // that flow's own; the others are shared. Flows by their own cap, lowest first.
  std::vector<double> own_cap(flows, kUnlimited);
  std::vector<int> shared;
  for (size_t r = 0; r < resources; ++r) {
    if (unfixed[r] >= 2) shared.push_back(static_cast<int>(r));
    if (unfixed[r] != 1) continue;
    for (int f : flows_of[r]) {
      if (!fixed[f]) own_cap[f] = std::min(own_cap[f], problem.capacity[r]);
    }
  }
  std::vector<int> by_cap;
  for (size_t f = 0; f < flows; ++f) {
    if (!fixed[f]) by_cap.push_back(static_cast<int>(f));
  }
  std::sort(by_cap.begin(), by_cap.end(), [&](int a, int b) { return own_cap[a] < own_cap[b]; });
  auto fix = [&](int f, double value) {
    rate[f] = value, fixed[f] = 1;
    for (int r : problem.path[f]) left[r] -= value, --unfixed[r];
  };
  // Progressive filling: the water level is the smallest fair share of a
  // shared resource. Flows capped below it on their own get their cap (which
  // only raises the shares left for the others); otherwise the resource at
  // the level is the bottleneck of its unfixed flows. The level never falls.
  size_t next = 0;
  for (;;) {
    int bottleneck = -1;
    double level = kUnlimited;
    for (int r : shared) {
      if (unfixed[r] == 0) continue;
      const double fair = std::max(left[r], 0.0) / unfixed[r];
      if (fair < level) level = fair, bottleneck = r;
    }
    while (next < by_cap.size() && fixed[by_cap[next]]) ++next;
    if (next < by_cap.size() && own_cap[by_cap[next]] <= level && own_cap[by_cap[next]] < kUnlimited) {
      while (next < by_cap.size() && (fixed[by_cap[next]] || own_cap[by_cap[next]] <= level)) {
        if (!fixed[by_cap[next]]) fix(by_cap[next], own_cap[by_cap[next]]);
        ++next;
      }
      continue;
    }
    if (bottleneck < 0) break;
    for (int f : flows_of[bottleneck]) {
      if (!fixed[f]) fix(f, level);
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
  auto add = [&](double capacity) {
    problem.capacity.push_back(capacity);
    return static_cast<int>(problem.capacity.size()) - 1;
  };
  // Resource ids made on first use: pair links, each NIC's two sides, each site uplink's two.
  std::unordered_map<long long, int> pair;
  pair.reserve(transfers.size());
  const SharedLinks& shared = network.shared;
  const int n = network.device_count;
  std::vector<int> nic_out(shared.nic_bytes_per_s.empty() ? 0 : n, -1), nic_in = nic_out;
  std::map<std::string, std::pair<int, int>> uplink;  // site -> (out, in)
  for (const auto& [site, capacity] : shared.site_uplink_bytes_per_s) uplink[site] = {-1, -1};
  auto once = [&](int& id, double capacity) {
    if (id < 0) id = add(capacity);
    return id;
  };
  problem.path.reserve(transfers.size());
  for (const Transfer& t : transfers) {
    auto [it, added] = pair.try_emplace(static_cast<long long>(t.from) * n + t.to, -1);
    std::vector<int> path{once(it->second, network.bandwidth(t.from, t.to))};
    if (!nic_out.empty()) {
      path.push_back(once(nic_out[t.from], shared.nic_bytes_per_s[t.from]));
      path.push_back(once(nic_in[t.to], shared.nic_bytes_per_s[t.to]));
    }
    if (!uplink.empty() && network.site(t.from) != network.site(t.to)) {
      if (auto out = uplink.find(network.site(t.from)); out != uplink.end()) {
        path.push_back(once(out->second.first, shared.site_uplink_bytes_per_s.at(out->first)));
      }
      if (auto in = uplink.find(network.site(t.to)); in != uplink.end()) {
        path.push_back(once(in->second.second, shared.site_uplink_bytes_per_s.at(in->first)));
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
