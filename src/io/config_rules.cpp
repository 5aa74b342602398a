// The rules that tie sections of the settings tree together: each one names
// the key a user would change. Checks against the rank count are made where
// the rank count is known (runtime/job_layout.cpp), through Config::error.
#include <algorithm>
#include <string>

#include "config_fields.hpp"
#include "geotrain/plan/pipeline_schedule.hpp"

namespace geotrain::io::config_table {
namespace {

// The exchanges that compression encodes on the host: NCCL sums and moves
// GPU memory as is.
void check_transport(const Config& c, const Checks& checks) {
  if (c.network.transport != Transport::nccl) return;
  for (const auto& [key, format] : {std::pair{"compression.gradients", c.compression.gradients},
                                    std::pair{"compression.tied_embedding", c.compression.tied_embedding}}) {
    if (format != WireFormat::fp32) checks.fail(key, "needs network.transport = mpi (NCCL sums fp32 on the GPU)");
  }
  for (const auto& [key, format] : {std::pair{"compression.activations", c.compression.activations},
                                    std::pair{"compression.activation_gradients", c.compression.activation_gradients}}) {
    if (format != WireFormat::fp32) checks.fail(key, "needs network.transport = mpi (messages are encoded on the host)");
  }
  if (c.device.kind == DeviceRequest::cpu) {
    checks.fail("network.transport", "nccl needs device.kind = cuda or auto (NCCL moves GPU memory)");
  }
}

void check_flushless(const Config& c, const Checks& checks) {
  const PipelineSettings& p = c.pipeline;
  if (!p.flushless) return;
  const char* key = "pipeline.flushless";
  if (p.micro_batches_per_flush > 0 && p.micro_batches_per_flush != c.train.gradient_accumulation) {
    checks.fail(key, "cannot be combined with pipeline.micro_batches_per_flush (there are no flushes)");
  }
  const int slots = plan::flushless_slots(p.stages, std::max(0, p.flushless_ahead));
  if (c.train.gradient_accumulation < slots) {
    checks.fail("train.gradient_accumulation",
                "must be >= (1 + pipeline.flushless_ahead) x (pipeline.stages - 1) + 1 = " + std::to_string(slots) +
                    " with pipeline.flushless (the micro-batches in flight at the first stage); got " +
                    std::to_string(c.train.gradient_accumulation));
  }
  if (!c.checkpoint.dir.empty() || !c.checkpoint.resume.empty()) {
    checks.fail(key, std::string("cannot be combined with ") +
                         (c.checkpoint.dir.empty() ? "checkpoint.resume" : "checkpoint.dir") +
                         " yet (a checkpoint would have to hold both weight versions and the next step's micro-batches "
                         "in flight)");
  }
  if (c.outer.fragments > 1) checks.fail(key, "cannot be combined with outer.fragments > 1 yet (streamed fragments)");
  if (c.network.transport == Transport::nccl) checks.fail(key, "needs network.transport = mpi");
  if (c.outer.synchronous_steps > 0) {
    checks.fail("outer.synchronous_steps", "cannot be combined with pipeline.flushless yet (the stream would have to "
                "change its per-step sum in flight)");
  }
}

}  // namespace

void check_cross_section_rules(const Config& c, const Checks& checks) {
  check_transport(c, checks);
  if (c.pipeline.micro_batches_per_flush > 0 && c.train.gradient_accumulation % c.pipeline.micro_batches_per_flush != 0) {
    checks.fail("pipeline.micro_batches_per_flush", "is " + std::to_string(c.pipeline.micro_batches_per_flush) +
                ", which does not divide train.gradient_accumulation (" + std::to_string(c.train.gradient_accumulation) + ")");
  }
  check_flushless(c, checks);
  if (c.outer.local_steps > 0 && c.network.transport == Transport::nccl) {
    checks.fail("outer.local_steps", "needs network.transport = mpi (the outer step runs on the host)");
  }
  if (c.optimizer.warmup_steps > c.train.steps) {
    const bool by_default = c.optimizer.warmup_steps == decltype(c.optimizer){}.warmup_steps;
    checks.fail("optimizer.warmup_steps", "is " + std::to_string(c.optimizer.warmup_steps) +
                                              (by_default ? " (the default)" : "") + ", larger than train.steps (" +
                                              std::to_string(c.train.steps) + "): set it to at most " +
                                              std::to_string(c.train.steps) + " (e.g. --optimizer.warmup_steps=0)");
  }
}

}  // namespace geotrain::io::config_table

namespace geotrain::io {

int fixed_tensor_parallel(const Config& config) {
  return config.pipeline.tensor_parallel > 1 ? config.pipeline.tensor_parallel : 1;
}

void check_rank_count(const Config& config, const ModelShape& model, int ranks) {
  const PipelineSettings& p = config.pipeline;
  const int pp = p.plan_file.empty() ? p.stages : 1;  // a plan file: its own stages, checked when it is read
  if (!p.plan_file.empty() && p.tensor_parallel != 1) {
    throw config.error("pipeline.tensor_parallel", std::to_string(p.tensor_parallel) +
                       " cannot be combined with pipeline.plan_file (the plan file's tp fixes it)");
  }
  const int tp = fixed_tensor_parallel(config);  // the layout search's own choice, or a plan file's: later
  if (ranks % tp != 0) {
    throw config.error("pipeline.tensor_parallel", std::to_string(tp) + " does not divide the " + std::to_string(ranks) +
                       " ranks of this job (ranks = tensor_parallel x stages x data-parallel replicas)");
  }
  if (tp > 1 && (model.heads % tp != 0 || model.vocabulary < tp)) {
    throw config.error("pipeline.tensor_parallel",
                       std::to_string(tp) + " does not divide the model's " + std::to_string(model.heads) + " heads");
  }
  if ((ranks / tp) % pp != 0) {
    throw config.error("pipeline.stages", std::to_string(pp) + " does not divide the " + std::to_string(ranks / tp) + " " +
                       (tp > 1 ? "tensor-parallel units" : "ranks") + " of this job (ranks = " +
                       (tp > 1 ? "tensor_parallel x " : "") +
                       "stages x data-parallel replicas; change the rank count or pipeline.stages)");
  }
  const std::vector<double>& slowdown = config.emulation.compute_slowdown;
  if (!slowdown.empty() && static_cast<int>(slowdown.size()) != ranks) {
    throw config.error("emulation.compute_slowdown", "has " + std::to_string(slowdown.size()) + " entries but the job has " +
                       std::to_string(ranks) + " ranks (one factor per rank, or none)");
  }
}

}  // namespace geotrain::io
