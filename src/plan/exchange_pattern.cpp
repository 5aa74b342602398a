#include "geotrain/plan/exchange_pattern.hpp"

#include <algorithm>
#include <string>

namespace geotrain::plan {
namespace {

ExchangePhase all_pairs(const std::vector<int>& members, double bytes) {
  ExchangePhase phase;
  if (members.size() > 1) phase.all_pairs.push_back({members, bytes});
  return phase;
}

// Two members swap whole buffers; more reduce-scatter then all-gather 1/D
// shards between every pair.
std::vector<ExchangePhase> direct(const std::vector<int>& g, double bytes) {
  const auto d = static_cast<double>(g.size());
  if (g.size() <= 1) return {};
  if (g.size() == 2) return {all_pairs(g, bytes)};
  ExchangePhase shards = all_pairs(g, bytes / d);
  shards.repeat = 2;  // the reduce-scatter, then the all-gather: the same transfers
  return {shards};
}

std::vector<ExchangePhase> ring(const std::vector<int>& g, double bytes) {
  const int d = static_cast<int>(g.size());
  ExchangePhase step;
  for (int k = 0; k < d; ++k) step.transfers.push_back({g[k], g[(k + 1) % d], bytes / d});
  step.repeat = 2 * (d - 1);
  return {step};
}

// Reduce along g1 -> ... -> g(d-1) -> g0, then broadcast g0 -> g1 -> ... -> g(d-1).
std::vector<ExchangePhase> central(const std::vector<int>& g, double bytes) {
  const int d = static_cast<int>(g.size());
  ExchangePhase reduce, broadcast;
  reduce.pipelined_chain = broadcast.pipelined_chain = true;
  for (int k = 1; k < d; ++k) reduce.transfers.push_back({g[k], g[(k + 1) % d], bytes});
  for (int k = 0; k + 1 < d; ++k) broadcast.transfers.push_back({g[k], g[k + 1], bytes});
  return {reduce, broadcast};
}

// Phases of the per-site parts run at once: phase k of every part together.
// Parts whose phases repeat differently are first written out one repeat
// at a time.
void run_together(std::vector<ExchangePhase>* into, std::vector<std::vector<ExchangePhase>> parts) {
  const auto& first = parts.front();
  const bool alike = std::all_of(parts.begin(), parts.end(), [&](const auto& p) {
    return p.size() == first.size() &&
           std::equal(p.begin(), p.end(), first.begin(), [](const auto& a, const auto& b) { return a.repeat == b.repeat; });
  });
  if (!alike) {
    for (auto& p : parts) {
      std::vector<ExchangePhase> once;
      for (ExchangePhase& phase : p) {
        const int repeat = phase.repeat;
        phase.repeat = 1;
        once.insert(once.end(), static_cast<size_t>(repeat), phase);
      }
      p = std::move(once);
    }
  }
  size_t longest = 0;
  for (const auto& p : parts) longest = std::max(longest, p.size());
  for (size_t k = 0; k < longest; ++k) {
    ExchangePhase together;
    for (const auto& p : parts) {
      if (k >= p.size()) continue;
      together.repeat = p[k].repeat;
      together.transfers.insert(together.transfers.end(), p[k].transfers.begin(), p[k].transfers.end());
      together.all_pairs.insert(together.all_pairs.end(), p[k].all_pairs.begin(), p[k].all_pairs.end());
    }
    if (!together.transfers.empty() || !together.all_pairs.empty()) into->push_back(std::move(together));
  }
}

std::vector<ExchangePhase> hierarchical(const Network& net, const std::vector<int>& g, double bytes) {
  const auto sites = members_by_site(net, g);
  const size_t k = sites.front().size();
  const bool even = std::all_of(sites.begin(), sites.end(), [&](const auto& s) { return s.size() == k; });
  if (sites.size() == 1 || (even && k == 1)) return direct(g, bytes);
  std::vector<ExchangePhase> phases;
  if (even) {
    // Striped: member i of each site holds the site's sum of shard i after
    // the site's reduce-scatter; the members i of all sites sum it across
    // sites; the site's all-gather spreads the result.
    std::vector<std::vector<ExchangePhase>> inside, across;
    for (const auto& site : sites) inside.push_back({all_pairs(site, bytes / static_cast<double>(k))});
    for (size_t i = 0; i < k; ++i) {
      std::vector<int> stripe;
      for (const auto& site : sites) stripe.push_back(site[i]);
      across.push_back(direct(stripe, bytes / static_cast<double>(k)));
    }
    run_together(&phases, inside);
    run_together(&phases, across);
    run_together(&phases, inside);
    return phases;
  }
  // Sites of unequal sizes: each site's members send their whole buffer to
  // its first member, the leaders sum directly, the leaders send the sum back.
  ExchangePhase gather, spread;
  std::vector<int> leaders;
  for (const auto& site : sites) {
    leaders.push_back(site.front());
    for (size_t m = 1; m < site.size(); ++m) {
      gather.transfers.push_back({site[m], site.front(), bytes});
      spread.transfers.push_back({site.front(), site[m], bytes});
    }
  }
  if (!gather.transfers.empty()) phases.push_back(gather);
  for (auto& phase : direct(leaders, bytes)) phases.push_back(std::move(phase));
  if (!spread.transfers.empty()) phases.push_back(spread);
  return phases;
}

}  // namespace

std::vector<std::vector<int>> members_by_site(const Network& net, const std::vector<int>& g) {
  std::vector<std::string> names;
  std::vector<std::vector<int>> sites;
  for (int u : g) {
    const auto it = std::find(names.begin(), names.end(), net.site(u));
    if (it == names.end()) {
      names.push_back(net.site(u));
      sites.push_back({u});
    } else {
      sites[it - names.begin()].push_back(u);
    }
  }
  return sites;
}

std::vector<ExchangePhase> exchange_phases(const Network& net, const std::vector<int>& g, double bytes,
                                           DataParallelScheme scheme) {
  if (g.size() <= 1) return {};
  switch (scheme) {
    case DataParallelScheme::paper:
    case DataParallelScheme::direct:
      return direct(g, bytes);
    case DataParallelScheme::ring:
      return ring(g, bytes);
    case DataParallelScheme::central:
      return central(g, bytes);
    case DataParallelScheme::hierarchical:
      return hierarchical(net, g, bytes);
    case DataParallelScheme::automatic:
      return exchange_phases(net, g, bytes, group_scheme(net, g, bytes, scheme));
  }
  return {};
}

double phases_s(const Network& net, const std::vector<ExchangePhase>& phases, bool with_latency) {
  double total = 0;
  for (const ExchangePhase& phase : phases) {
    double seconds = 0;
    if (phase.pipelined_chain) {
      const auto drained = drain_times_s(flows_on(net, phase.transfers));
      for (const Transfer& t : phase.transfers) seconds += with_latency ? net.latency(t.from, t.to) : 0.0;
      if (!drained.empty()) seconds += *std::max_element(drained.begin(), drained.end());
    } else {
      seconds = phase_bound_s(net, phase, with_latency);
    }
    total += phase.repeat * seconds;
  }
  return total;
}

double phases_latency_s(const Network& net, const std::vector<ExchangePhase>& phases) {
  double total = 0;
  for (const ExchangePhase& phase : phases) {
    double seconds = 0;
    for (const Transfer& t : phase.transfers) {
      const double latency = net.latency(t.from, t.to);
      seconds = phase.pipelined_chain ? seconds + latency : std::max(seconds, latency);
    }
    for (const AllPairs& group : phase.all_pairs) {
      for (int u : group.members) {
        for (int v : group.members) {
          if (u != v) seconds = std::max(seconds, net.latency(u, v));
        }
      }
    }
    total += phase.repeat * seconds;
  }
  return total;
}

}  // namespace geotrain::plan
