#include "geotrain/runtime/timing_record.hpp"

#include <algorithm>
#include <limits>

#include "geotrain/common/wire_bytes.hpp"
#include "geotrain/io/config_plan.hpp"
#include "geotrain/plan/simulator.hpp"
#include "geotrain/plan/tensor_parallel.hpp"
#include "geotrain/runtime/progress_log.hpp"

namespace geotrain::runtime {
namespace {

// Bytes of `values` values on the wire in `format`, with the run's group size and top-k share.
double encoded_bytes(const io::Config& config, WireFormat format, double values) {
  return wire_encoded_bytes(config.compression.encoding(format), values);
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

// When the step ends (gradient_sync.cpp): each stage group is ready once
// its data-parallel exchange is done; the last stage then sends its half of
// the tied embedding to the first, which needs it before its part of the
// norm; every stage sends its part of the norm (and the loss) straight to
// every other, and the first stage its half to the last. The step ends
// when the last of those messages arrives.
double step_end_s(const plan::Network& network, const plan::Plan& plan, const plan::SimulationResult& simulated,
                  double embedding_bytes) {
  const int pp = plan.pipeline_stages;
  double end = simulated.iteration_s;
  std::vector<double> ready(static_cast<std::size_t>(pp));
  for (int s = 0; s < pp; ++s) ready[s] = simulated.stage_last_backward_s[s] + simulated.stage_datap_s[s];
  for (int r = 0; r < plan.data_parallel; ++r) {
    std::vector<int> chain;
    for (int s = 0; s < pp; ++s) chain.push_back(plan.stages[s][r]);
    std::vector<double> sends = ready;
    if (pp > 1 && embedding_bytes > 0) {  // 0: an untied head, nothing swapped
      sends[0] = std::max(ready[0], ready[pp - 1] + network.transfer_s(chain.back(), chain.front(), embedding_bytes));
    }
    for (int s = 0; s < pp; ++s) {
      for (int t = 0; t < pp; ++t) {
        if (s != t) end = std::max(end, sends[s] + network.latency(chain[s], chain[t]));
      }
    }
    if (pp > 1 && embedding_bytes > 0) {
      end = std::max(end, ready[0] + network.transfer_s(chain.front(), chain.back(), embedding_bytes));
    }
  }
  return end;
}

// What the run's pipeline does, for the simulator: the measured compute,
// the bytes as the run encodes them ([compression]; fp32 where unset), the
// schedule and the exchange MpiCollectives runs.
plan::PipelineWork predicted_work(const io::Config& config, const ModelShape& model, const JobDescription& job,
                                  const std::vector<RankTiming>& ranks, const MeasuredCompute& measured) {
  plan::PipelineWork work;
  work.flushes = job.layout.flushes();
  work.micro_batches_per_flush = job.layout.micro_batches / work.flushes;
  work.forward_s = measured.forward_s;
  work.backward_s = measured.backward_s;
  auto encoded = [&](WireFormat format, double values) { return encoded_bytes(config, format, values); };
  const double values = 1.0 * job.layout.micro_batch_sequences * model.sequence_length * model.hidden;
  work.activation_bytes = encoded(config.compression.activations, values);
  work.activation_gradient_bytes = encoded(config.compression.activation_gradients, values);
  work.outer = io::outer_sync(config);
  // The per-step sum: the gradient on its wire; with local steps only the
  // sites' (outer.sync_within_site), always fp32 (their own communicator).
  const WireFormat step_wire = work.outer.enabled() ? WireFormat::fp32 : config.compression.gradients;
  const int last = static_cast<int>(job.plan.stages.size()) - 1;
  for (int s = 0; s <= last; ++s) {
    // Under tensor parallelism each rank of a unit sums its own slice with its replicas.
    const int first_rank = job.plan.ranks_of_unit(job.plan.stages[s][0]).front();
    const double parameters = static_cast<double>(ranks[first_rank].stage_parameters);
    work.gradient_bytes.push_back(encoded(config.compression.gradients, parameters));
    if (work.outer.within_site) work.site_gradient_bytes.push_back(encoded(WireFormat::fp32, parameters));
    // What the backward reports only at its end: wte (+ wpe on the first stage), see Stage::backward.
    const double vocabulary = 1.0 * model.vocabulary * model.hidden, positions = 1.0 * model.sequence_length * model.hidden;
    const double tied_copy = s == last && last > 0 && model.tied_head ? vocabulary : 0.0;
    const double at_end = (s == 0 ? vocabulary + positions : 0.0) + tied_copy;
    work.layer_gradient_bytes.push_back(encoded(step_wire, std::max(parameters - at_end, 0.0)));
  }
  if (config.network.gradient_bucket_mb > 0 && job.plan.data_parallel > 1 && (!work.outer.enabled() || work.outer.within_site)) {
    work.bucket_bytes = encoded(step_wire, config.network.gradient_bucket_mb * (1 << 20) / sizeof(float));
  }
  work.schedule = config.pipeline.schedule;
  work.dp_scheme = plan::DataParallelScheme::direct;  // what MpiCollectives ran (network.dp_exchange)
  work.stage_dp_scheme = job.dp_schemes;
  work.overlap_communication = true;                 // sends are non-blocking on a copy
  return work;
}

}  // namespace

JobDescription single_rank_job(const std::string& device, const StepLayout& layout) {
  JobDescription job;
  job.layout = layout;
  job.device = device;
  job.network.device_count = 1;
  job.network.latency_s = {0.0};
  job.network.bandwidth_bytes_per_s = {std::numeric_limits<double>::infinity()};
  job.network_source = "single rank";
  job.plan.pipeline_stages = 1;
  job.plan.data_parallel = 1;
  job.plan.stages = {{0}};
  job.plan_text = "single rank: 1 stage x 1 replica";
  return job;
}

MeasuredCompute measured_compute(const std::vector<io::TimingEvent>& events,
                                 const std::vector<std::int32_t>& stage_of_rank, int stages) {
  std::vector<std::vector<double>> forward(stages), backward(stages);
  std::vector<double> optimizer;
  for (const io::TimingEvent& e : events) {
    if (e.rank < 0 || e.rank >= static_cast<int>(stage_of_rank.size())) continue;
    const int s = stage_of_rank[e.rank];
    const double d = e.end_s - e.start_s;
    if (e.kind == io::EventKind::forward) forward[s].push_back(d);
    if (e.kind == io::EventKind::backward) backward[s].push_back(d);
    if (e.kind == io::EventKind::optimizer) optimizer.push_back(d);
  }
  MeasuredCompute m;
  for (int s = 0; s < stages; ++s) {
    m.forward_s.push_back(median(forward[s]));
    m.backward_s.push_back(median(backward[s]));
  }
  m.optimizer_s = median(optimizer);
  return m;
}

io::TimingRun make_timing_run(const io::Config& config, const ModelShape& model, const JobDescription& job,
                              const TrainResult& reporting, const std::vector<RankTiming>& ranks) {
  io::TimingRun run;
  const int n = static_cast<int>(ranks.size());
  const int pp = job.plan.pipeline_stages, dp = job.plan.data_parallel;
  run.config_text = io::describe(config);
  run.layout_text = describe(job.layout);
  run.model_name = model.name;
  run.device = job.device;
  run.schedule = plan::to_string(config.pipeline.schedule);
  run.placement = n > 1 ? plan::to_string(config.pipeline.placement) : "single rank";
  run.plan_text = job.plan_text;
  if (job.plan.data_parallel > 1 && !job.dp_schemes.empty()) {
    run.plan_text += "data-parallel exchange by stage: " + plan::to_string(job.dp_schemes) + "\n";
  }
  run.network_source = job.network_source;
  run.ranks = n;
  run.pipeline_stages = pp;
  run.data_parallel = dp;
  run.micro_batches = job.layout.micro_batches;
  run.micro_batch_sequences = job.layout.micro_batch_sequences;
  run.sequence_length = model.sequence_length;
  run.first_step = reporting.first_step;
  run.tokens_per_step = reporting.tokens_per_step;
  run.model_flops_per_token = reporting.model_flops_per_token;
  run.device_peak_flops_per_s = peak_tflops(config, job.device) * 1e12;
  run.latency_s = job.network.latency_s;
  run.bandwidth_bytes_per_s = job.network.bandwidth_bytes_per_s;
  run.site_of_rank = job.network.site_of_device;
  run.site_of_rank.resize(static_cast<std::size_t>(n));
  run.stage_of_rank.assign(n, -1);  // -1: a rank the layout left idle
  run.replica_of_rank.assign(n, -1);
  for (int s = 0; s < pp; ++s) {
    for (int r = 0; r < dp; ++r) {
      for (const int rank : job.plan.ranks_of_unit(job.plan.stages[s][r])) {
        run.devices.push_back(rank);
        run.stage_of_rank[rank] = s;
        run.replica_of_rank[rank] = r;
      }
    }
  }
  const std::size_t steps = reporting.step_loss.size();
  for (std::size_t i = 0; i < steps; ++i) run.step.push_back(reporting.first_step + static_cast<int>(i) + 1);
  run.loss = reporting.step_loss;
  run.learning_rate = reporting.step_learning_rate;
  run.grad_norm = reporting.step_grad_norm;
  run.validation_step = reporting.validation_step;
  run.validation_loss = reporting.validation_loss;
  for (const RankTiming& r : ranks) {
    std::vector<double> wall = r.step_seconds;
    wall.resize(steps, 0.0);
    run.wall_time_s.insert(run.wall_time_s.end(), wall.begin(), wall.end());
    run.events.insert(run.events.end(), r.events.begin(), r.events.end());
  }

  // The prediction: the simulator on the job's network and plan, compute
  // per stage and the optimizer from the measured medians (the planner's
  // cost model covers communication only).
  run.predicted_datap_s = job.plan.cost.datap_s;
  run.predicted_pipeline_s = job.plan.cost.pipeline_s;
  const MeasuredCompute measured = measured_compute(run.events, run.stage_of_rank, pp);
  run.forward_s = measured.forward_s;
  run.backward_s = measured.backward_s;
  const plan::PipelineWork work = predicted_work(config, model, job, ranks, measured);
  if (!run.events.empty()) {
    // Tensor parallelism: the plan names units, linked as the layout search links them.
    const plan::Network units = job.plan.tensor_parallel > 1
                                    ? plan::counterpart_network(job.network, job.plan.tensor_groups)
                                    : job.network;
    const plan::SimulationResult predicted = plan::simulate(units, job.plan, work);
    const double embedding_bytes =
        model.tied_head ? encoded_bytes(config, config.compression.tied_embedding, 1.0 * model.vocabulary * model.hidden) : 0.0;
    run.predicted_iteration_s = step_end_s(units, job.plan, predicted, embedding_bytes) + measured.optimizer_s;
    run.predicted_bubble_fraction = predicted.bubble_fraction;
  }
  return run;
}

}  // namespace geotrain::runtime
