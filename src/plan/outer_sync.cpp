// Local steps (DiLoCo-style data parallelism) in the iteration model: no
// gradient exchange per step; every H steps each stage group sums its
// pseudo-gradient. Its time is spread over the H steps it serves.
#include <algorithm>

#include "simulator_internal.hpp"

namespace geotrain::plan::simulation {
namespace {

// A step without data-parallel traffic: the pipeline, then the tied
// embedding's swap from each end's last backward. `ready` gets when each
// stage's inner step is done (its own sync may start).
double local_step_s(const Network& net, const Plan& plan, const PipelineWork& w, const SimulationResult& result,
                    std::vector<double>* ready, double* tied_s) {
  *ready = result.stage_last_backward_s;
  double step = result.pipeline_phase_s;
  const int last = plan.pipeline_stages - 1;
  if (last >= 1 && w.tied_embedding_bytes > 0) {
    const TiedTransfer tied = tied_transfer_s(net, plan, w);
    *tied_s = std::max(tied.down_s, tied.up_s);
    const double first_done = result.stage_last_backward_s[last] + tied.up_s;  // stage 0 needs the last's half
    const double last_done = result.stage_last_backward_s[0] + tied.down_s;
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
  const double step = local_step_s(net, plan, w, *result, &ready, &result->tied_exchange_s);
  const double h = w.outer.local_steps;
  double exposed = 0, slowest_exchange = 0;
  for (int s = 0; s < plan.pipeline_stages; ++s) {
    const std::vector<int>& group = plan.stages[s];
    const double whole = datap_exchange_s(net, group, w.gradient_bytes[s], w.dp_scheme);
    result->stage_datap_s.push_back(whole);
    slowest_exchange = std::max(slowest_exchange, whole);
    if (w.outer.streamed()) {
      const double steps_per_fragment = h / w.outer.fragments;
      const double fragment = datap_exchange_s(net, group, w.gradient_bytes[s] / w.outer.fragments, w.dp_scheme);
      exposed = std::max(exposed, std::max(0.0, fragment - steps_per_fragment * step) / steps_per_fragment);
    } else {
      exposed = std::max(exposed, std::max(0.0, ready[s] + whole - step) / h);
    }
  }
  result->local_step_s = step;
  result->outer_exposed_s = exposed;
  result->datap_comm_s = slowest_exchange / h;
  result->iteration_s = step + exposed;
}

}  // namespace geotrain::plan::simulation
