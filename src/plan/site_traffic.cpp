// Bytes crossing sites per step: what a geo-distributed run pays for, and
// what local steps divide (the data-parallel part) by H.
#include <string>
#include <vector>

#include "geotrain/plan/exchange_pattern.hpp"
#include "simulator_internal.hpp"

namespace geotrain::plan::simulation {
namespace {

// Ordered pairs of `members` at different sites: d^2 less each site's m^2.
long long cross_site_pairs(const Network& net, const std::vector<int>& members) {
  long long pairs = static_cast<long long>(members.size()) * static_cast<long long>(members.size());
  for (const auto& site : members_by_site(net, members)) pairs -= static_cast<long long>(site.size() * site.size());
  return pairs;
}

// Bytes each stage group's exchange sends between members of different
// sites, once: the pattern datap_exchange_s prices.
double datap_cross_site_bytes(const Network& net, const std::vector<int>& g, double bytes, DataParallelScheme scheme) {
  double total = 0;
  for (const ExchangePhase& phase : exchange_phases(net, g, bytes, scheme)) {
    double crossing = 0;
    for (const Transfer& t : phase.transfers) {
      if (net.site(t.from) != net.site(t.to)) crossing += t.bytes;
    }
    for (const AllPairs& group : phase.all_pairs) crossing += group.bytes * static_cast<double>(cross_site_pairs(net, group.members));
    total += phase.repeat * crossing;
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
        exchanges_per_step * datap_cross_site_bytes(net, plan.stages[s], w.gradient_bytes[s], stage_scheme(w, s));
  }
}

}  // namespace geotrain::plan::simulation
