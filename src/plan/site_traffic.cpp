// Bytes crossing sites per step: what a geo-distributed run pays for, and
// what local steps divide (the data-parallel part) by H.
#include <string>

#include "simulator_internal.hpp"

namespace geotrain::plan::simulation {
namespace {

// Bytes each stage group's exchange sends between members of different
// sites, once, under the scheme's pattern (datap_exchange_s prices the same).
double datap_cross_site_bytes(const Network& net, const std::vector<int>& g, double bytes, DataParallelScheme scheme) {
  const int d = static_cast<int>(g.size());
  if (d <= 1) return 0.0;
  auto apart = [&](int u, int v) { return net.site(u) != net.site(v); };
  double total = 0;
  switch (scheme) {
    case DataParallelScheme::paper:
    case DataParallelScheme::direct:
      // Every ordered pair: u's part of v's shard, then u's summed shard
      // (d = 2 direct: the whole buffer once each way, the same bytes).
      for (int u : g) {
        for (int v : g) {
          if (u != v && apart(u, v)) total += 2.0 * bytes / d;
        }
      }
      return total;
    case DataParallelScheme::ring:
      for (int k = 0; k < d; ++k) {
        if (apart(g[k], g[(k + 1) % d])) total += 2.0 * (d - 1) * bytes / d;
      }
      return total;
    case DataParallelScheme::central:
      // Reduce along g1 .. g(d-1) -> g0, broadcast g0 -> g1 .. g(d-1): the whole buffer per hop.
      for (int k = 1; k < d; ++k) {
        if (apart(g[k], g[(k + 1) % d])) total += bytes;
        if (apart(g[k - 1], g[k])) total += bytes;
      }
      return total;
  }
  return total;
}

}  // namespace

void add_cross_site_traffic(const Network& net, const Plan& plan, const PipelineWork& w, SimulationResult* result) {
  if (net.site_of_device.empty()) return;
  const int p = plan.pipeline_stages, d = plan.data_parallel;
  const double per_micro_batch = w.activation_bytes + w.activation_gradient_bytes.value_or(w.activation_bytes);
  const double micro_batches = static_cast<double>(w.micro_batches_per_flush) * w.flushes;
  for (int r = 0; r < d; ++r) {
    for (int s = 0; s + 1 < p; ++s) {
      if (net.site(plan.stages[s][r]) != net.site(plan.stages[s + 1][r])) {
        result->cross_site_pipeline_bytes += micro_batches * per_micro_batch;
      }
    }
    if (p > 1 && w.tied_embedding_bytes > 0 && net.site(plan.stages[0][r]) != net.site(plan.stages[p - 1][r])) {
      result->cross_site_tied_bytes += 2.0 * w.tied_embedding_bytes;
    }
  }
  const double exchanges_per_step = w.outer.enabled() ? 1.0 / w.outer.local_steps : 1.0;
  for (int s = 0; s < p; ++s) {
    result->cross_site_datap_bytes +=
        exchanges_per_step * datap_cross_site_bytes(net, plan.stages[s], w.gradient_bytes[s], w.dp_scheme);
  }
}

}  // namespace geotrain::plan::simulation
