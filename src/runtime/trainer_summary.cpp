// What a rank reports about itself: its parameters and memory at the start,
// and at the end the job's means, every rank's compute utilisation and the
// check that replicas (and a tied embedding's two copies) hold the same bits.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "geotrain/common/errors.hpp"
#include "geotrain/plan/memory_model.hpp"
#include "rank_trainer.hpp"

namespace geotrain::runtime {

std::uint64_t RankTrainer::parameter_fingerprint(std::size_t offset, std::size_t count) {
  std::vector<float> host(count ? count : stage_.parameter_count());
  with_.backend.download(host.data(), stage_.params() + offset, host.size());
  std::uint64_t hash = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(host.data());
  for (std::size_t i = 0; i < host.size() * sizeof(float); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

void RankTrainer::count_parameters() {
  // Tensor parallelism: each tensor counted once over the unit.
  const bool second_copy = role_.stages > 1 && role_.spec.has_head;
  double own = 0;
  for (const model::ParameterView& view : stage_.parameters()) {
    if (second_copy && view.name == "wte") continue;
    own += static_cast<double>(view.count) * view.unit_share(role_.spec.tensor_parallel);
  }
  const double parameters = std::round(sum_over_job(own) / role_.replicas);
  result_.model_flops_per_token = flops_per_token(model_, parameters);
  progress_.text() << "geotrain train: model " << model_.name << " (" << static_cast<long long>(parameters) << " parameters, "
       << model_.layers << " layers, hidden " << model_.hidden << "), " << with_.backend.description() << "\n"
       << "  " << config_.train.steps << " steps x " << role_.replicas << " replicas x " << m_ << " micro-batches"
       << (flushes_ > 1 ? " (" + std::to_string(flushes_) + " flushes)" : std::string()) << " x " << B_
       << " sequences x " << T_ << " tokens; data " << config_.data.train << "\n";
  report_memory();
}

void RankTrainer::report_memory() {
  plan::MemorySettings settings;
  settings.reserved_bytes = 0;
  settings.activation_storage = config_.device.activation_storage;
  settings.tensor_parallel = role_.spec.tensor_parallel;
  const model::StageSpec& spec = role_.spec;
  const int slots = activation_slots(config_, m_ / flushes_, role_.stages);
  const plan::StageMemory memory = plan::stage_memory(
      model_, {spec.last_layer - spec.first_layer, spec.has_embedding, spec.has_head}, B_, slots, settings);
  const auto mib = [](double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", bytes / (1024.0 * 1024.0));
    return std::string(text);
  };
  progress_.text() << "  memory of stage " << role_.stage + 1 << " of " << role_.stages << ": weights, gradients, AdamW "
                   << mib(memory.state_bytes) << " MiB; activations " << mib(memory.activation_bytes) << " MiB ("
                   << to_string(config_.device.activation_storage) << " storage, " << slots
                   << (slots == 1 ? " micro-batch" : " micro-batches") << " in flight); workspace " << mib(memory.workspace_bytes) << " MiB"
                   << (config_.pipeline.flushless
                           ? "; flushless: a second weight version and gradient buffer " +
                                 mib(2.0 * sizeof(float) * static_cast<double>(stage_.parameter_count())) + " MiB"
                           : std::string())
                   << "\n";
}

void RankTrainer::summarize() {
  const int done_steps = static_cast<int>(result_.step_loss.size());
  const int timed_steps = done_steps > 1 ? done_steps - 1 : 1;
  const int ranks = role_.job_ranks;
  constexpr int kMeans = 5, kFingerprintParts = 3;
  std::vector<double> sums = {own_.step_s, own_.compute_s, own_.pipeline_s, own_.data_parallel_s, own_.optimizer_s};
  // Then, per replica, the tied embedding's fingerprint on its first and on its last stage.
  const std::size_t tied_at = kMeans + static_cast<std::size_t>(ranks) * (1 + kFingerprintParts);
  sums.resize(tied_at + 2 * static_cast<std::size_t>(role_.replicas) * kFingerprintParts, 0.0);
  sums[kMeans + role_.job_index] = own_.step_s > 0 ? own_.compute_s / own_.step_s : 0.0;
  const std::uint64_t fingerprint = parameter_fingerprint();
  // Fingerprints by (stage, tensor rank, replica): the replicas of one slice of the model must agree.
  const int position = (role_.stage * role_.spec.tensor_parallel + role_.spec.tensor_rank) * role_.replicas + role_.replica;
  for (int part = 0; part < kFingerprintParts; ++part) {  // 21 bits each: exact in a double's sum
    sums[kMeans + ranks * (1 + part) + position] = static_cast<double>((fingerprint >> (21 * part)) & 0x1FFFFF);
  }
  const model::ParameterView* wte = stage_.find("wte");
  if (splits_tied_embedding() && wte != nullptr) {
    const std::uint64_t tied = parameter_fingerprint(wte->offset, wte->count);
    const std::size_t end = role_.spec.has_head ? 1 : 0;  // a stage with both ends is not split (stages > 1)
    for (int part = 0; part < kFingerprintParts; ++part) {
      sums[tied_at + (2 * static_cast<std::size_t>(role_.replica) + end) * kFingerprintParts + part] =
          static_cast<double>((tied >> (21 * part)) & 0x1FFFFF);
    }
  }
  with_.collectives.sum_over_pipeline_values(sums.data(), static_cast<int>(sums.size()));
  with_.collectives.sum_data_parallel_values(sums.data(), static_cast<int>(sums.size()));
  if (with_.tensor_group != nullptr) with_.tensor_group->sum_values(sums.data(), static_cast<int>(sums.size()));
  auto mean_per_step = [&](int i) { return sums[i] / ranks / timed_steps; };
  result_.breakdown = {mean_per_step(0), mean_per_step(1), mean_per_step(2), mean_per_step(3), mean_per_step(4)};
  result_.compute_utilisation.assign(sums.begin() + kMeans, sums.begin() + kMeans + ranks);
  result_.replicas_identical = true;
  // Local steps: replicas differ between synchronisations (a run stopped by a signal ends between them).
  const bool must_agree = !outer_ || outer_->replicas_agree();
  for (int part = 0; part < kFingerprintParts; ++part) {
    const double* of = sums.data() + kMeans + ranks * (1 + part);
    for (int at = 0; at < ranks; ++at) {
      if (of[at] != of[at - at % role_.replicas]) result_.replicas_identical = false;  // vs replica 0
    }
  }
  for (int replica = 0; replica < role_.replicas; ++replica) {
    const double* first = sums.data() + tied_at + 2 * static_cast<std::size_t>(replica) * kFingerprintParts;
    if (!std::equal(first, first + kFingerprintParts, first + kFingerprintParts)) {
      throw RunError("the tied embedding's two copies diverged: replica " + std::to_string(replica) +
                     "'s first and last stage hold different bits after step " +
                     std::to_string(result_.first_step + done_steps) + " (their gradient sum is not the same on both)");
    }
  }
  if (!result_.replicas_identical && must_agree) {
    throw RunError("replicas diverged: the ranks of one stage hold different parameters after step " +
                   std::to_string(result_.first_step + done_steps) + " (a data-parallel exchange is not exact)");
  }
  result_.tokens_per_second = result_.breakdown.step_s > 0 ? result_.tokens_per_step / result_.breakdown.step_s : 0.0;
  result_.events = timeline_.take_events();
  result_.stage_parameters = static_cast<std::int64_t>(stage_.parameter_count());
  result_.device = with_.backend.description();
}

}  // namespace geotrain::runtime
