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

// Max-min fair rates by progressive filling. The water level is the
// smallest fair share of a shared resource (crossed by two flows or more).
// A resource only one flow crosses (its pair link, mostly) is a cap of that
// flow's own: flows capped below the level get their cap (which only raises
// the shares left for the others); otherwise the resource at the level is
// the bottleneck of its unfixed flows. The level never falls.
class ProgressiveFilling {
 public:
  ProgressiveFilling(const FlowProblem& problem, const std::vector<char>& active)
      : problem_(problem), flows_of_(problem.capacity.size()), rate_(problem.path.size(), 0.0),
        left_(problem.capacity), fixed_(problem.path.size(), 0), unfixed_(problem.capacity.size(), 0),
        own_cap_(problem.path.size(), kUnlimited) {
    for (size_t f = 0; f < problem.path.size(); ++f) {
      if (!active.empty() && !active[f]) {
        fixed_[f] = 1;
      } else if (problem.path[f].empty()) {
        rate_[f] = kUnlimited, fixed_[f] = 1;
      } else {
        for (int r : problem.path[f]) ++unfixed_[r], flows_of_[r].push_back(static_cast<int>(f));
      }
    }
    for (size_t r = 0; r < problem.capacity.size(); ++r) {
      if (unfixed_[r] >= 2) shared_.push_back(static_cast<int>(r));
      if (unfixed_[r] == 1) own_cap_[flows_of_[r].front()] = std::min(own_cap_[flows_of_[r].front()], problem.capacity[r]);
    }
    for (size_t f = 0; f < problem.path.size(); ++f) {
      if (!fixed_[f]) by_cap_.push_back(static_cast<int>(f));
    }
    std::sort(by_cap_.begin(), by_cap_.end(), [&](int a, int b) { return own_cap_[a] < own_cap_[b]; });
  }

  std::vector<double> rates() {
    for (;;) {
      int bottleneck = -1;
      const double level = water_level(&bottleneck);
      if (fix_capped_up_to(level)) continue;
      if (bottleneck < 0) return rate_;
      for (int f : flows_of_[bottleneck]) {
        if (!fixed_[f]) fix(f, level);
      }
    }
  }

 private:
  double water_level(int* bottleneck) const {
    double level = kUnlimited;
    for (int r : shared_) {
      if (unfixed_[r] == 0) continue;
      const double fair = std::max(left_[r], 0.0) / unfixed_[r];
      if (fair < level) level = fair, *bottleneck = r;
    }
    return level;
  }

  // Fixes every unfixed flow whose own cap is at most `level`; whether any was.
  bool fix_capped_up_to(double level) {
    bool any = false;
    for (; next_ < by_cap_.size(); ++next_) {
      const int f = by_cap_[next_];
      if (fixed_[f]) continue;
      if (!(own_cap_[f] <= level && own_cap_[f] < kUnlimited)) break;
      fix(f, own_cap_[f]);
      any = true;
    }
    return any;
  }

  void fix(int f, double value) {
    rate_[f] = value, fixed_[f] = 1;
    for (int r : problem_.path[f]) left_[r] -= value, --unfixed_[r];
  }

  const FlowProblem& problem_;
  std::vector<std::vector<int>> flows_of_;  // the active flows that cross each resource
  std::vector<double> rate_, left_;
  std::vector<char> fixed_;
  std::vector<int> unfixed_, shared_, by_cap_;
  std::vector<double> own_cap_;
  size_t next_ = 0;  // by_cap_ before it is fixed
};

}  // namespace

std::vector<double> max_min_rates(const FlowProblem& problem, const std::vector<char>& active) {
  return ProgressiveFilling(problem, active).rates();
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
