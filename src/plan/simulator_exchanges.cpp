// What the data-parallel sums and the tied embedding's transfer take on
// the network: one exchange under each scheme, and when a stage's sum ends
// with gradient buckets overlapping its backward.
#include <algorithm>
#include <limits>

#include "geotrain/plan/exchange_cost.hpp"
#include "geotrain/plan/exchange_pattern.hpp"
#include "geotrain/plan/simulator.hpp"
#include "simulator_internal.hpp"

namespace geotrain::plan {
namespace {

// The cost model's DATAP (§2.2) of one group alone: CostModel::datap on the
// group's own links with this stage's gradient as c_DP, summed in the same
// order (so bit for bit the same), without building a subnetwork per call.
double paper_datap_s(const Network& network, const std::vector<int>& members, double bytes) {
  const double shard = bytes / static_cast<double>(members.size());
  double worst = 0;
  for (int u : members) {
    double sum = 0;
    for (int v : members) {
      if (v != u) sum += network.transfer_s(u, v, shard) + network.transfer_s(v, u, shard);
    }
    worst = std::max(worst, sum);
  }
  return worst;
}

// Shared links (and the hierarchical pattern, always): the sum is priced
// through its phases' transfers; `paper` keeps the DT-FM formula.
bool priced_by_phases(const Network& net, DataParallelScheme scheme) {
  return scheme != DataParallelScheme::paper && (net.shared.any() || scheme == DataParallelScheme::hierarchical);
}

// The group's cost from the cache where one is given and the scheme is
// priced by the fluid bound of its phases; null: price it on this call.
std::shared_ptr<const ExchangeCost> cached_cost(const Network& net, const std::vector<int>& g, DataParallelScheme scheme,
                                                ExchangeCostCache* costs) {
  const bool bound = scheme == DataParallelScheme::direct || scheme == DataParallelScheme::ring ||
                     scheme == DataParallelScheme::hierarchical;
  if (!costs || g.size() <= 1 || !bound || !priced_by_phases(net, scheme)) return nullptr;
  return costs->get(net, g, scheme);
}

}  // namespace

double datap_exchange_s(const Network& net, const std::vector<int>& g, double bytes, DataParallelScheme scheme,
                        ExchangeCostCache* costs) {
  const int d = static_cast<int>(g.size());
  if (d <= 1) return 0.0;
  if (scheme == DataParallelScheme::paper) return paper_datap_s(net, g, bytes);
  if (scheme == DataParallelScheme::automatic) {
    return std::min(datap_exchange_s(net, g, bytes, DataParallelScheme::direct, costs),
                    datap_exchange_s(net, g, bytes, DataParallelScheme::hierarchical, costs));
  }
  if (const auto cost = cached_cost(net, g, scheme, costs)) return cost->seconds(bytes);
  if (priced_by_phases(net, scheme)) return phases_s(net, exchange_phases(net, g, bytes, scheme));
  // Each transfer alone on its pair link: the phases' closed forms.
  const double shard = bytes / d;
  switch (scheme) {
    case DataParallelScheme::ring: {
      double step = 0;
      for (int k = 0; k < d; ++k) step = std::max(step, net.transfer_s(g[k], g[(k + 1) % d], shard));
      return 2.0 * (d - 1) * step;
    }
    case DataParallelScheme::direct: {
      double slowest = 0;  // each phase: every pair at once, each on its own link
      for (int u : g) {
        for (int v : g) {
          if (u != v) slowest = std::max(slowest, net.transfer_s(u, v, d == 2 ? bytes : shard));
        }
      }
      return d == 2 ? slowest : 2.0 * slowest;
    }
    case DataParallelScheme::central: {
      // Each a chain pipelined in small chunks: the latencies add up, the
      // bytes pass once through the chain's slowest link.
      auto chain = [&](const std::vector<int>& order) {
        double latency = 0, slowest = std::numeric_limits<double>::infinity();
        for (size_t k = 0; k + 1 < order.size(); ++k) {
          latency += net.latency(order[k], order[k + 1]);
          slowest = std::min(slowest, net.bandwidth(order[k], order[k + 1]));
        }
        return latency + bytes / slowest;
      };
      std::vector<int> reduce(g.begin() + 1, g.end());
      reduce.push_back(g[0]);
      return chain(reduce) + chain(g);
    }
    case DataParallelScheme::paper:
    case DataParallelScheme::hierarchical:
    case DataParallelScheme::automatic:
      break;
  }
  return 0;
}

// The latencies are paid once, after the last bucket. With shared links the
// loads over the capacities alone: the difference of two exchanges would
// take the slowest pair's latency off a NIC's or uplink's time that never
// held it.
DataParallelScheme group_scheme(const Network& net, const std::vector<int>& g, double bytes, DataParallelScheme scheme,
                                ExchangeCostCache* costs) {
  if (scheme != DataParallelScheme::automatic) return scheme;
  const double hierarchical_s = datap_exchange_s(net, g, bytes, DataParallelScheme::hierarchical, costs);
  return hierarchical_s < datap_exchange_s(net, g, bytes, DataParallelScheme::direct, costs)
             ? DataParallelScheme::hierarchical
             : DataParallelScheme::direct;
}

double datap_bytes_s(const Network& net, const std::vector<int>& group, double bytes, DataParallelScheme scheme) {
  scheme = group_scheme(net, group, bytes, scheme);
  if (group.size() > 1 && priced_by_phases(net, scheme)) {
    return phases_s(net, exchange_phases(net, group, bytes, scheme), false);
  }
  return datap_exchange_s(net, group, bytes, scheme) - datap_exchange_s(net, group, 0.0, scheme);
}

namespace simulation {

// When the sum of `total` bytes over `group` (stage s's data-parallel group,
// or its devices in one site) ends, the stage's last backward ending at
// `finish`. With buckets (runtime/gradient_buckets.hpp) the layers' gradient
// becomes ready evenly over that backward, a bucket starts once it is full,
// and the buckets' bytes queue on the group's links while their latencies
// overlap (all are in flight together): the sum ends one exchange latency
// after the last bytes, which are the rest (embeddings, head and any partial
// bucket) sent from the backward's end.
BucketSchedule bucket_schedule(const std::vector<int>& group, double total, const PipelineWork& w, int s,
                               double finish) {
  const double layers = std::min(w.layer_gradient_bytes[s], total);
  // Mixed devices: the group's slowest device runs the longest last backward.
  double backward = 0;
  for (int d : group) {
    const double scale = w.device_time_scale.empty() ? 1.0 : w.device_time_scale[d];
    backward = std::max(backward, w.backward_s[s] * scale + tensor_allreduce_s(w, s, d, true));
  }
  BucketSchedule buckets;
  while (layers - buckets.sent >= w.bucket_bytes) {
    buckets.sent += w.bucket_bytes;
    buckets.ready.push_back(finish - backward + backward * buckets.sent / layers);
  }
  return buckets;
}

double datap_end_s(const Network& net, const std::vector<int>& group, double total, const PipelineWork& w, int s,
                   double finish) {
  const DataParallelScheme scheme = stage_scheme(w, s);
  if (!sums_in_buckets(w, s)) return finish + datap_exchange_s(net, group, total, scheme, w.exchange_costs.get());
  const BucketSchedule buckets = bucket_schedule(group, total, w, s, finish);
  // Shared links: the loads over the capacities grow with the bytes, so one
  // build of the phases prices the latencies, every bucket and the rest.
  const bool linear = priced_by_phases(net, scheme);
  double latency = 0, per_byte_s = 0;
  if (const auto cost = cached_cost(net, group, scheme, w.exchange_costs.get())) {
    latency = cost->latency_s();
    per_byte_s = cost->bytes_s(1.0);
  } else if (linear) {
    const std::vector<ExchangePhase> phases = exchange_phases(net, group, 1.0, scheme);
    latency = phases_latency_s(net, phases);
    per_byte_s = phases_s(net, phases, false);
  } else {
    latency = datap_exchange_s(net, group, 0.0, scheme);
  }
  auto bytes_s = [&](double bytes) {
    return linear ? per_byte_s * bytes : datap_bytes_s(net, group, bytes, scheme);
  };
  const double one_bucket_s = bytes_s(w.bucket_bytes);
  double link_free = -std::numeric_limits<double>::infinity();
  for (double ready : buckets.ready) link_free = std::max(link_free, ready) + one_bucket_s;
  const double rest_s = bytes_s(total - buckets.sent);
  return std::max(link_free, finish) + rest_s + latency;
}

TiedTransfer tied_transfer_s(const Network& net, const Plan& plan, const PipelineWork& w) {
  TiedTransfer slowest;
  const int last = plan.pipeline_stages - 1;
  if (last < 1 || !(w.tied_embedding_bytes > 0)) return slowest;
  if (net.shared.any()) {  // every replica's ends swap at once
    std::vector<Transfer> down, up;
    for (int r = 0; r < plan.data_parallel; ++r) {
      down.push_back({plan.stages[0][r], plan.stages[last][r], w.tied_embedding_bytes});
      up.push_back({plan.stages[last][r], plan.stages[0][r], w.tied_embedding_bytes});
    }
    return {concurrent_transfers_s(net, down), concurrent_transfers_s(net, up)};
  }
  for (int r = 0; r < plan.data_parallel; ++r) {
    const int head = plan.stages[0][r], tail = plan.stages[last][r];
    slowest.down_s = std::max(slowest.down_s, net.transfer_s(head, tail, w.tied_embedding_bytes));
    slowest.up_s = std::max(slowest.up_s, net.transfer_s(tail, head, w.tied_embedding_bytes));
  }
  return slowest;
}

}  // namespace simulation

}  // namespace geotrain::plan
