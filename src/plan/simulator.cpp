// One iteration of a plan: the pipeline phase (simulator_replicas.cpp),
// then the data-parallel sums and the tied embedding (or local steps' outer
// sync, outer_sync.cpp), and what crosses between sites (site_traffic.cpp).
#include "geotrain/plan/simulator.hpp"

#include <algorithm>

#include "geotrain/common/errors.hpp"
#include "simulator_internal.hpp"

namespace geotrain::plan {
namespace {

void check_plan_fits(const Network& net, const Plan& plan, const PipelineWork& w) {
  const int p = plan.pipeline_stages, d = plan.data_parallel;
  if (p < 1 || d < 1 || static_cast<int>(plan.stages.size()) != p) throw InputError("simulate: bad plan shape");
  if (static_cast<int>(w.forward_s.size()) != p || static_cast<int>(w.backward_s.size()) != p ||
      static_cast<int>(w.gradient_bytes.size()) != p) {
    throw InputError("simulate: work has " + std::to_string(w.forward_s.size()) + " stages, plan has " +
                     std::to_string(p));
  }
  if (!w.device_time_scale.empty() && static_cast<int>(w.device_time_scale.size()) != net.device_count) {
    throw InputError("simulate: " + std::to_string(w.device_time_scale.size()) +
                     " device speeds for a network of " + std::to_string(net.device_count));
  }
  if (w.micro_batches_per_flush < 1 || w.flushes < 1) {
    throw InputError("simulate: need at least one micro-batch and one flush");
  }
  if (w.outer.enabled() && w.outer.within_site && static_cast<int>(w.site_gradient_bytes.size()) != p) {
    throw InputError("simulate: sites summing every step need each stage's gradient bytes (" +
                     std::to_string(w.site_gradient_bytes.size()) + " for " + std::to_string(p) + " stages)");
  }
  if (w.tensor_parallel > 1 && !w.tensor_latency_s.empty()) {
    if (static_cast<int>(w.tensor_latency_s.size()) != net.device_count ||
        static_cast<int>(w.tensor_bandwidth_bytes_per_s.size()) != net.device_count ||
        static_cast<int>(w.tensor_forward_allreduces.size()) != p || static_cast<int>(w.tensor_backward_allreduces.size()) != p) {
      throw InputError("simulate: tensor-parallel links for " + std::to_string(w.tensor_latency_s.size()) +
                       " units, the network has " + std::to_string(net.device_count));
    }
  }
  std::vector<char> used(net.device_count, 0);
  for (const auto& stage : plan.stages) {
    if (static_cast<int>(stage.size()) != d) throw InputError("simulate: bad plan shape");
    for (int dev : stage) {
      if (dev < 0 || dev >= net.device_count || used[dev]) {
        throw InputError("simulate: device " + std::to_string(dev) + " out of range or used twice");
      }
      used[dev] = 1;
    }
  }
}

// Each stage group exchanges its gradient once its last backward is done
// in every replica; the iteration ends with the slowest group.
void add_datap_exchanges(const Network& net, const Plan& plan, const PipelineWork& w, SimulationResult* result) {
  result->iteration_s = result->pipeline_phase_s;
  // With shared links the stage groups' sums and their buckets play together; `paper` stays the
  // DT-FM cost model's DATAP. The joint play recomputes the rates of the flows in flight (up to
  // one phase of every group) at each of its events (up to one per transfer): past kJointWork
  // flow-events it is too slow for the layout search and each group is priced alone
  // (datap_end_s), missing what the groups, and the buckets in flight together, share.
  constexpr double kJointWork = 1e6;
  const double in_flight = static_cast<double>(plan.data_parallel) * (plan.data_parallel - 1) * plan.pipeline_stages;
  const double buckets = w.bucket_bytes > 0 ? 1.0 + *std::max_element(w.gradient_bytes.begin(), w.gradient_bytes.end()) / w.bucket_bytes : 1.0;
  const bool together = net.shared.any() && plan.data_parallel > 1 &&
                        w.dp_scheme != DataParallelScheme::paper && in_flight * in_flight * buckets <= kJointWork;
  const std::vector<double> shared_ends =
      together ? simulation::shared_datap_ends(net, plan, w, result->stage_last_backward_s) : std::vector<double>{};
  for (int s = 0; s < plan.pipeline_stages; ++s) {
    // What the step waits for after the backward: the exposed part of the sum.
    const double finish = result->stage_last_backward_s[s];
    const double exchange = (shared_ends.empty() ? simulation::datap_end_s(net, plan.stages[s], w.gradient_bytes[s], w, s, finish)
                                                 : shared_ends[s]) - finish;
    result->stage_datap_s.push_back(exchange);
    result->datap_comm_s = std::max(result->datap_comm_s, exchange);
    result->iteration_s = std::max(result->iteration_s, result->stage_last_backward_s[s] + exchange);
  }
}

// The tied embedding: once its group's exchange is done, each end of a
// replica sends its gradient of wte to the other (gradient_sync.cpp sums
// it after the data-parallel exchange); the optimizer step needs both.
void add_tied_exchange(const Network& net, const Plan& plan, const PipelineWork& w, SimulationResult* result) {
  const int last = plan.pipeline_stages - 1;
  if (last < 1 || !(w.tied_embedding_bytes > 0)) return;
  const double first_ready = result->stage_last_backward_s[0] + result->stage_datap_s[0];
  const double last_ready = result->stage_last_backward_s[last] + result->stage_datap_s[last];
  const simulation::TiedTransfer tied = simulation::tied_transfer_s(net, plan, w);
  result->tied_exchange_s = std::max(tied.down_s, tied.up_s);
  result->iteration_s = std::max({result->iteration_s, first_ready + tied.down_s, last_ready + tied.up_s});
}

// `auto` resolved once per stage group (group_scheme of its whole gradient),
// so that every part of the step prices the same choice.
std::vector<DataParallelScheme> chosen_schemes(const Network& net, const Plan& plan, const PipelineWork& w) {
  std::vector<DataParallelScheme> schemes = w.stage_dp_scheme;
  for (int s = static_cast<int>(schemes.size()); s < plan.pipeline_stages; ++s) {
    const bool choose = w.dp_scheme == DataParallelScheme::automatic && plan.data_parallel > 1;
    schemes.push_back(choose ? group_scheme(net, plan.stages[s], w.gradient_bytes[s], w.dp_scheme, w.exchange_costs.get()) : w.dp_scheme);
  }
  return schemes;
}

}  // namespace

SimulationResult simulate(const Network& net, const Plan& plan, const PipelineWork& given, bool record_trace) {
  check_plan_fits(net, plan, given);
  PipelineWork resolved;
  const bool resolve = given.dp_scheme == DataParallelScheme::automatic &&
                       static_cast<int>(given.stage_dp_scheme.size()) < plan.pipeline_stages;
  if (resolve) {
    resolved = given;
    resolved.stage_dp_scheme = chosen_schemes(net, plan, given);
  }
  const PipelineWork& w = resolve ? resolved : given;
  if (w.flushless && (w.schedule != Schedule::one_f_one_b || w.flushes != 1 || w.flushless_ahead < 0 ||
                      w.micro_batches_per_flush < flushless_slots(plan.pipeline_stages, w.flushless_ahead))) {
    throw InputError("a flushless pipeline runs 1F1B in one flush per step of at least (1 + ahead) x "
                     "(stages - 1) + 1 = " +
                     std::to_string(flushless_slots(plan.pipeline_stages, std::max(0, w.flushless_ahead))) +
                     " micro-batches");
  }
  const int p = plan.pipeline_stages, d = plan.data_parallel, m = w.micro_batches_per_flush;
  SimulationResult result;
  result.stage_dp_scheme = chosen_schemes(net, plan, w);
  result.micro_batches = m * w.flushes;
  result.micro_batches_per_flush = m;
  result.flushes = w.flushes;
  std::vector<TraceEvent>* trace = record_trace ? &result.trace : nullptr;
  simulation::PipelinePhase phase;
  if (w.flushless) {
    phase = simulation::flushless_step(net, plan, w, trace);
  } else {
    std::vector<std::vector<Step>> programs;
    for (int s = 0; s < p; ++s) programs.push_back(pipeline_program(w.schedule, s, p, m, w.flushes));
    phase = simulation::play_replicas(net, plan, w, programs, trace);
  }
  result.stage_last_backward_s = phase.last_backward_s;
  for (int s = 0; s < p; ++s) {
    result.pipeline_phase_s = std::max(result.pipeline_phase_s, phase.last_backward_s[s]);
    result.compute_s = std::max(result.compute_s, phase.compute_s[s]);
    result.pipeline_comm_s = std::max(result.pipeline_comm_s, phase.sending_s[s]);
  }
  const double total_compute = phase.total_compute;
  const double least_compute = *std::min_element(phase.device_compute.begin(), phase.device_compute.end());
  if (w.outer.enabled()) {
    simulation::add_outer_sync(net, plan, w, &result);
  } else {
    add_datap_exchanges(net, plan, w, &result);
    if (!w.flushless) add_tied_exchange(net, plan, w, &result);
  }
  if (w.flushless) {  // the tied embedding's swap and the norm travel during the next step
    const simulation::TiedTransfer tied = simulation::tied_transfer_s(net, plan, w);
    result.tied_exchange_s = std::max(tied.down_s, tied.up_s);
    result.iteration_s = std::max(result.iteration_s, result.tied_exchange_s);
  }
  simulation::add_cross_site_traffic(net, plan, w, &result);
  if (result.iteration_s > 0) {
    result.utilisation_mean = total_compute / (static_cast<double>(p) * d) / result.iteration_s;
    result.utilisation_min = least_compute / result.iteration_s;
  }
  result.bubble_fraction =
      result.pipeline_phase_s > 0 ? 1.0 - total_compute / (static_cast<double>(p) * d * result.pipeline_phase_s) : 0.0;
  return result;
}

SimulationResult simulate(const Network& net, const Plan& plan, const SimulationConfig& c, bool record_trace) {
  SimulationResult result = simulate(net, plan, pipeline_work(c, plan.pipeline_stages, plan.data_parallel), record_trace);
  result.flops_per_iteration = iteration_flops(c, c.flops_formula);
  if (result.iteration_s > 0) {
    result.pflops = result.flops_per_iteration / result.iteration_s / 1e15;
    result.tokens_per_s = static_cast<double>(c.global_batch_sequences) * c.model.sequence_length / result.iteration_s;
  }
  return result;
}

}  // namespace geotrain::plan
