// Local steps (DiLoCo-style data parallelism) in the iteration model: no
// gradient exchange per step (but within each site, with outer.within_site);
// every H steps each stage group sums its pseudo-gradient. Its time is
// spread over the H steps it serves.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "simulator_internal.hpp"

namespace geotrain::plan::simulation {
namespace {

// When each stage's per-step work is done: its last backward, or with
// outer.within_site the sum of its fp32 gradient among the replicas of each
// site (all sites at once; the slowest decides), which may overlap that
// backward in buckets.
std::vector<double> stage_done_s(const Network& net, const Plan& plan, const PipelineWork& w,
                                 const SimulationResult& result, double* site_sum_s) {
  std::vector<double> done = result.stage_last_backward_s;
  if (!w.outer.within_site) return done;
  for (int s = 0; s < plan.pipeline_stages; ++s) {
    std::map<std::string, std::vector<int>> by_site;
    for (int device : plan.stages[s]) by_site[net.site(device)].push_back(device);
    const double finish = result.stage_last_backward_s[s];
    for (const auto& [site, members] : by_site) {
      const double end = datap_end_s(net, members, w.site_gradient_bytes[s], w, s, finish);
      done[s] = std::max(done[s], end);
      *site_sum_s = std::max(*site_sum_s, end - finish);
    }
  }
  return done;
}

// A step without data-parallel traffic across sites: the pipeline (and the
// sites' sums), then the tied embedding's swap from each end's last work.
// `ready` gets when each stage's inner step is done (its own sync may start).
double local_step_s(const Network& net, const Plan& plan, const PipelineWork& w, const SimulationResult& result,
                    std::vector<double>* ready, double* tied_s, double* site_sum_s) {
  *ready = stage_done_s(net, plan, w, result, site_sum_s);
  double step = std::max(result.pipeline_phase_s, *std::max_element(ready->begin(), ready->end()));
  const int last = plan.pipeline_stages - 1;
  if (last >= 1 && w.tied_embedding_bytes > 0) {
    const TiedTransfer tied = tied_transfer_s(net, plan, w);
    *tied_s = std::max(tied.down_s, tied.up_s);
    const double first_done = (*ready)[last] + tied.up_s;  // stage 0 needs the last's half
    const double last_done = (*ready)[0] + tied.down_s;
    (*ready)[0] = std::max((*ready)[0], first_done);
    (*ready)[last] = std::max((*ready)[last], last_done);
    step = std::max({step, first_done, last_done});
  }
  return step;
}

}  // namespace

// Without fragments the H-th step ends with every group's whole exchange,
// each from the end of its stage's inner step: that step is longer by
// (its end - local step), 1/H of it per step. With F fragments one
// fragment's exchange (1/F of the bytes) starts every H/F steps and runs
// during the H/F inner steps until the next one starts (the runtime applies
// it then), the last of which waits for what is left of it.
void add_outer_sync(const Network& net, const Plan& plan, const PipelineWork& w, SimulationResult* result) {
  std::vector<double> ready;
  double site_sum = 0;
  const double step = local_step_s(net, plan, w, *result, &ready, &result->tied_exchange_s, &site_sum);
  const double h = w.outer.local_steps;
  double exposed = 0, slowest_exchange = 0;
  for (int s = 0; s < plan.pipeline_stages; ++s) {
    const std::vector<int>& group = plan.stages[s];
    const DataParallelScheme scheme = stage_scheme(w, s);
    const double whole = datap_exchange_s(net, group, w.gradient_bytes[s], scheme);
    result->stage_datap_s.push_back(whole);
    slowest_exchange = std::max(slowest_exchange, whole);
    if (w.outer.streamed()) {
      const double steps_per_fragment = h / w.outer.fragments;
      const double fragment = datap_exchange_s(net, group, w.gradient_bytes[s] / w.outer.fragments, scheme);
      exposed = std::max(exposed, std::max(0.0, fragment - steps_per_fragment * step) / steps_per_fragment);
    } else {
      exposed = std::max(exposed, std::max(0.0, ready[s] + whole - step) / h);
    }
  }
  result->local_step_s = step;
  result->outer_exposed_s = exposed;
  result->datap_comm_s = site_sum + slowest_exchange / h;
  result->iteration_s = step + exposed;
}

}  // namespace geotrain::plan::simulation
