#include "geotrain/plan/flow_sharing.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <functional>
#include <map>
#include <queue>
#include <string>
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
      : problem_(problem), rate_(problem.path.size(), 0.0), left_(problem.capacity),
        fixed_(problem.path.size(), 0), unfixed_(problem.capacity.size(), 0),
        own_cap_(problem.path.size(), kUnlimited) {
    // The active flows of each resource in one flat array (resource r's from first_[r]): no
    // allocation per resource, as there are as many pair links as flows.
    for (size_t f = 0; f < problem.path.size(); ++f) {
      if (!active.empty() && !active[f]) {
        fixed_[f] = 1;
      } else if (problem.path[f].empty()) {
        rate_[f] = kUnlimited, fixed_[f] = 1;
      } else {
        for (int r : problem.path[f]) ++unfixed_[r];
      }
    }
    first_.assign(problem.capacity.size() + 1, 0);
    for (size_t r = 0; r < problem.capacity.size(); ++r) first_[r + 1] = first_[r] + unfixed_[r];
    flows_.resize(first_.back());
    std::vector<int> at(first_.begin(), first_.end() - 1);
    for (size_t f = 0; f < problem.path.size(); ++f) {
      if (fixed_[f]) continue;
      for (int r : problem.path[f]) flows_[at[r]++] = static_cast<int>(f);
    }
    for (size_t r = 0; r < problem.capacity.size(); ++r) {
      if (unfixed_[r] >= 2) by_share_.emplace(fair_share(static_cast<int>(r)), static_cast<int>(r));
      if (unfixed_[r] == 1) own_cap_[flows_[first_[r]]] = std::min(own_cap_[flows_[first_[r]]], problem.capacity[r]);
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
      for (int k = first_[bottleneck]; k < first_[bottleneck + 1]; ++k) {
        if (!fixed_[flows_[k]]) fix(flows_[k], level);
      }
    }
  }

 private:
  double fair_share(int r) const { return std::max(left_[r], 0.0) / unfixed_[r]; }

  // The smallest fair share of a shared resource with unfixed flows (the
  // smallest id among equal ones). Shares never fall (a flow is fixed at
  // most at the share of every resource it crosses), so an entry of the
  // heap is a lower bound of its resource's share: refreshed when popped.
  double water_level(int* bottleneck) {
    while (!by_share_.empty()) {
      const auto [share, r] = by_share_.top();
      if (unfixed_[r] == 0) {
        by_share_.pop();
        continue;
      }
      const double now = fair_share(r);
      if (now > share) {
        by_share_.pop();
        by_share_.emplace(now, r);
        continue;
      }
      *bottleneck = r;
      return now;
    }
    return kUnlimited;
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
  std::vector<double> rate_, left_;
  std::vector<char> fixed_;
  std::vector<int> unfixed_, by_cap_;
  // Shared resources (crossed by two flows or more) by fair share, smallest first.
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>> by_share_;
  std::vector<int> first_, flows_;  // the active flows that cross each resource
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

LinkResources::LinkResources(const Network& network) : network_(network) {
  const int n = network.device_count;
  if (!network.shared.nic_bytes_per_s.empty()) nic_out_.assign(n, -1), nic_in_.assign(n, -1);
  for (const auto& [site, capacity] : network.shared.site_uplink_bytes_per_s) uplink_[site] = {-1, -1};
}

int LinkResources::once(int& id, double capacity) {
  if (id < 0) {
    capacity_.push_back(capacity);
    id = static_cast<int>(capacity_.size()) - 1;
  }
  return id;
}

std::vector<int> LinkResources::path(const Transfer& t) {
  const Network& net = network_;
  const SharedLinks& shared = net.shared;
  auto [it, added] = pair_.try_emplace(static_cast<long long>(t.from) * net.device_count + t.to, -1);
  std::vector<int> path{once(it->second, net.bandwidth(t.from, t.to))};
  if (!nic_out_.empty()) {
    path.push_back(once(nic_out_[t.from], shared.nic_bytes_per_s[t.from]));
    path.push_back(once(nic_in_[t.to], shared.nic_bytes_per_s[t.to]));
  }
  if (!uplink_.empty() && net.site(t.from) != net.site(t.to)) {
    if (auto out = uplink_.find(net.site(t.from)); out != uplink_.end()) {
      path.push_back(once(out->second.first, shared.site_uplink_bytes_per_s.at(out->first)));
    }
    if (auto in = uplink_.find(net.site(t.to)); in != uplink_.end()) {
      path.push_back(once(in->second.second, shared.site_uplink_bytes_per_s.at(in->first)));
    }
  }
  return path;
}

FlowProblem flows_on(const Network& network, const std::vector<Transfer>& transfers) {
  LinkResources resources(network);
  FlowProblem problem;
  problem.path.reserve(transfers.size());
  for (const Transfer& t : transfers) {
    problem.path.push_back(resources.path(t));
    problem.bytes.push_back(t.bytes);
  }
  problem.capacity = resources.capacities();
  return problem;
}

std::vector<double> arrival_times_s(const Network& network, const std::vector<Transfer>& transfers) {
  auto arrival = drain_times_s(flows_on(network, transfers));
  for (size_t k = 0; k < transfers.size(); ++k) arrival[k] += network.latency(transfers[k].from, transfers[k].to);
  return arrival;
}

namespace {

// A resource's load (bytes through it) and the smallest latency of the transfers that cross it.
struct Load {
  double bytes = 0, latency = std::numeric_limits<double>::infinity();  // infinite: no transfer crosses it
  void add(double b, double l) { bytes += b, latency = std::min(latency, l); }
  double seconds(double capacity) const {
    return latency < std::numeric_limits<double>::infinity() ? bytes / capacity + latency : 0.0;
  }
};

// The pair links' part of the bound: the transfers grouped by sender (a
// counting sort), a receiver's repeats summed through a stamp per receiver.
// O(transfers + devices): sorting the pairs took a third of the layout
// search at 1,024 devices.
double pair_links_s(const Network& network, const std::vector<Transfer>& transfers, bool with_latency) {
  const int n = network.device_count;
  std::vector<int> start(static_cast<size_t>(n) + 1, 0);
  for (const Transfer& t : transfers) ++start[static_cast<size_t>(t.from) + 1];
  for (int d = 0; d < n; ++d) start[d + 1] += start[d];
  std::vector<int> order(transfers.size()), next(start.begin(), start.end() - 1);
  for (size_t k = 0; k < transfers.size(); ++k) order[static_cast<size_t>(next[transfers[k].from]++)] = static_cast<int>(k);
  std::vector<int> stamp(static_cast<size_t>(n), -1);
  std::vector<double> bytes_to(static_cast<size_t>(n), 0.0);
  double end = 0;
  for (int from = 0; from < n; ++from) {
    for (int i = start[from]; i < start[from + 1]; ++i) {
      const Transfer& t = transfers[static_cast<size_t>(order[i])];
      if (stamp[t.to] != from) stamp[t.to] = from, bytes_to[t.to] = 0;
      bytes_to[t.to] += t.bytes;
    }
    for (int i = start[from]; i < start[from + 1]; ++i) {
      const int to = transfers[static_cast<size_t>(order[i])].to;
      Load load;
      load.add(bytes_to[to], with_latency ? network.latency(from, to) : 0.0);
      end = std::max(end, load.seconds(network.bandwidth(from, to)));
    }
  }
  return end;
}

}  // namespace

double fluid_bound_s(const Network& network, const std::vector<Transfer>& transfers, bool with_latency) {
  const SharedLinks& shared = network.shared;
  const int n = network.device_count;
  double any_bytes = 0, slowest_latency = 0;
  for (const Transfer& t : transfers) {
    any_bytes += t.bytes;
    slowest_latency = std::max(slowest_latency, network.latency(t.from, t.to));
  }
  // No bytes: every resource's time is its smallest latency, and the pair
  // links' are all of them (the exchange of no bytes, priced per sum).
  if (any_bytes == 0) return with_latency ? slowest_latency : 0.0;
  // The resources of LinkResources::path, tallied without its hash map and
  // per-transfer paths (which made the layout search at 1,024 devices 1.7x slower).
  std::vector<Load> nic_out(shared.nic_bytes_per_s.empty() ? 0 : n), nic_in = nic_out;
  std::map<std::string, std::pair<Load, Load>> uplink;  // site -> (out, in)
  for (const Transfer& t : transfers) {
    const double latency = with_latency ? network.latency(t.from, t.to) : 0.0;
    if (!nic_out.empty()) nic_out[t.from].add(t.bytes, latency), nic_in[t.to].add(t.bytes, latency);
    if (!shared.site_uplink_bytes_per_s.empty() && network.site(t.from) != network.site(t.to)) {
      if (shared.site_uplink_bytes_per_s.count(network.site(t.from))) uplink[network.site(t.from)].first.add(t.bytes, latency);
      if (shared.site_uplink_bytes_per_s.count(network.site(t.to))) uplink[network.site(t.to)].second.add(t.bytes, latency);
    }
  }
  // The last byte through a resource leaves it no sooner than its load at its
  // capacity, and arrives one latency (the smallest of its transfers') later.
  double end = pair_links_s(network, transfers, with_latency);
  for (size_t d = 0; d < nic_out.size(); ++d) {
    end = std::max({end, nic_out[d].seconds(shared.nic_bytes_per_s[d]), nic_in[d].seconds(shared.nic_bytes_per_s[d])});
  }
  for (const auto& [site, load] : uplink) {
    const double capacity = shared.site_uplink_bytes_per_s.at(site);
    end = std::max({end, load.first.seconds(capacity), load.second.seconds(capacity)});
  }
  return end;
}

double concurrent_transfers_s(const Network& network, const std::vector<Transfer>& transfers) {
  const auto arrival = arrival_times_s(network, transfers);
  return arrival.empty() ? 0.0 : *std::max_element(arrival.begin(), arrival.end());
}

double binding_capacity(const Network& network, const std::vector<Transfer>& transfers, double seconds) {
  const double unlimited = std::numeric_limits<double>::infinity();
  if (transfers.empty()) return unlimited;
  FlowProblem problem = flows_on(network, transfers);
  const int extra = static_cast<int>(problem.capacity.size());
  for (auto& path : problem.path) path.push_back(extra);
  double total = 0;
  for (const Transfer& t : transfers) total += t.bytes;
  auto drain_s = [&](double capacity) {
    problem.capacity.resize(static_cast<size_t>(extra));
    problem.capacity.push_back(capacity);
    const std::vector<double> ends = drain_times_s(problem);
    return *std::max_element(ends.begin(), ends.end());
  };
  // Without the resource: as fast as the transfers' own links let them.
  // The resource alone takes at least total / C, so C >= total / seconds.
  const double alone = drain_s(std::numeric_limits<double>::max());
  if (!(seconds > 1.05 * alone)) return unlimited;
  double low = total / seconds, high = 2 * low;
  while (drain_s(high) > seconds) low = high, high *= 2;
  // The drain time falls as the capacity grows: bisect between the two.
  for (int step = 0; step < 100 && high - low > 1e-9 * high; ++step) {
    const double middle = 0.5 * (low + high);
    (drain_s(middle) > seconds ? low : high) = middle;
  }
  return 0.5 * (low + high);
}

double fan_in_capacity(const std::vector<double>& pair_rates, double bytes_each, double seconds) {
  double sum = 0;
  for (double rate : pair_rates) sum += rate;
  // Device 0 receives from devices 1..n, each over its pair's rate.
  const int n = static_cast<int>(pair_rates.size()) + 1;
  Network star;
  star.device_count = n;
  star.latency_s.assign(static_cast<size_t>(n) * n, 0.0);
  star.bandwidth_bytes_per_s.assign(static_cast<size_t>(n) * n, std::numeric_limits<double>::max());
  std::vector<Transfer> fan_in;
  for (int f = 1; f < n; ++f) {
    star.bandwidth_bytes_per_s[static_cast<size_t>(f) * n] = pair_rates[f - 1];
    fan_in.push_back({f, 0, bytes_each});
  }
  const double capacity = binding_capacity(star, fan_in, seconds);
  return std::isinf(capacity) ? sum : capacity;
}

}  // namespace geotrain::plan
