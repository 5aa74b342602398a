// A rank's part of checkpoints: what it writes (parameters, moments, the
// data position, error-feedback residuals, local-steps state) and how a run
// resumes from them, with a note wherever the resume cannot be bit-exact.
#include <algorithm>

#include "geotrain/common/errors.hpp"
#include "rank_trainer.hpp"
#include "resume_notes.hpp"
#include "termination.hpp"

namespace geotrain::runtime {

void RankTrainer::resume_from(const io::Checkpoint& checkpoint, const std::string& path) {
  restore_tensors(stage_, optimizer_, with_.backend, checkpoint, path);
  data_.restore(checkpoint.sampler);
  result_.first_step = static_cast<int>(checkpoint.completed_steps);
  resumed_ = true;
  resume_notes_ = "resumed from " + path + " after step " + std::to_string(result_.first_step) + "\n" +
                  batch_change_note(checkpoint.global_batch_sequences, B_, m_, role_.replicas) +
                  schedule_change_note(checkpoint.config_text, config_);
  restore_residuals(checkpoint, path);
  if (!config_.checkpoint.init_from.empty()) {
    resume_notes_ += "note: checkpoint.init_from (" + config_.checkpoint.init_from +
                     ") not used: this run continues from its own checkpoint\n";
  }
}

std::string RankTrainer::residual_layout() const {
  return to_string(config_.compression.gradients) +
         (tied_embedding_encoded() ? " tied_embedding=" + to_string(config_.compression.tied_embedding) : std::string()) +
         " group_size=" + std::to_string(config_.compression.group_size) +
         " topk_fraction=" + std::to_string(config_.compression.topk_fraction) +
         " bucket_mb=" + std::to_string(config_.network.gradient_bucket_mb) +
         " replicas=" + std::to_string(role_.replicas) +
         // Before local steps start, the residuals are the per-step sums' buckets', not the fragments'.
         (local_steps() && !local_phase() ? std::string(" synchronous_start") : std::string()) +
         (local_steps() ? " local_steps=" + std::to_string(config_.outer.local_steps) +
                              " fragments=" + std::to_string(config_.outer.fragments) +
                              (with_.within_site ? " within_site=" + std::to_string(role_.site_replicas) : "")
                        : std::string());
}

std::string RankTrainer::residual_prefix() const {
  const model::StageSpec& spec = role_.spec;
  return "layers_" + std::to_string(spec.first_layer) + "-" + std::to_string(spec.last_layer) +
         (spec.tensor_parallel > 1
              ? ".tensor_" + std::to_string(spec.tensor_rank) + "_of_" + std::to_string(spec.tensor_parallel)
              : std::string()) +
         ".replica_" + std::to_string(role_.replica) + ".";
}

void RankTrainer::restore_residuals(const io::Checkpoint& checkpoint, const std::string& path) {
  const bool gradient_residuals = config_.compression.gradients != WireFormat::fp32 && role_.replicas > 1;
  const bool tied_residuals = tied_embedding_encoded() && (role_.spec.has_embedding || role_.spec.has_head);
  if (!gradient_residuals && !tied_residuals) return;
  const std::string restart = ": they restart at zero, so this resume is not bit-exact with an uninterrupted run\n";
  if (checkpoint.residual_layout != residual_layout()) {
    resume_notes_ += "note: the checkpoint's gradient error-feedback residuals are for \"" +
                     (checkpoint.residual_layout.empty() ? std::string("fp32 (none)") : checkpoint.residual_layout) +
                     "\", this run is \"" + residual_layout() + "\"" + restart;
    return;
  }
  const std::string prefix = residual_prefix();
  NamedResiduals mine;
  bool same_cut = false;  // local-steps state under this prefix: the cut is this run's
  for (const io::CheckpointTensor& t : checkpoint.residuals) {
    if (t.name.rfind(prefix, 0) != 0) continue;
    same_cut = true;
    const bool local_state = t.name.compare(prefix.size(), kLocalState.size(), kLocalState) == 0;
    if (!local_state) mine.emplace_back(t.name.substr(prefix.size()), t.value);
  }
  if (mine.empty() && same_cut) return;  // none yet (local steps just started): zero, as in the run
  if (mine.empty()) {
    resume_notes_ += "note: the checkpoint holds no error-feedback residuals for " + prefix +
                     "* (another pipeline cut)" + restart;
    return;
  }
  try {
    with_.collectives.restore_gradient_residuals(mine);
  } catch (const std::logic_error& e) {  // a name these residuals cannot have come from
    throw InputError(path + ": /error_feedback: " + e.what());
  }
}

void RankTrainer::restore_local_state(const io::Checkpoint& checkpoint, const std::string& path) {
  const std::string prefix = residual_prefix() + std::string(kLocalState);
  NamedResiduals outer;
  const std::size_t count = stage_.parameter_count();
  auto own = [&](const io::CheckpointTensor& t, float* device, const char* what) {
    if (t.value.size() != count) throw InputError(path + ": /error_feedback/" + t.name + ": wrong size for " + what);
    with_.backend.upload(device, t.value.data(), count);
  };
  int found = 0;
  if (checkpoint.residual_layout == residual_layout()) {
    for (const io::CheckpointTensor& t : checkpoint.residuals) {
      if (t.name.rfind(prefix, 0) != 0) continue;
      const std::string part = t.name.substr(prefix.size());
      ++found;
      if (part == "params") own(t, stage_.params(), "the parameters");
      else if (part == "m") own(t, optimizer_.first_moment(), "the first moment");
      else if (part == "v") own(t, optimizer_.second_moment(), "the second moment");
      else outer.emplace_back(part, t.value);
    }
  }
  if (found == 0) {
    resume_notes_ += "note: the checkpoint holds no local-steps state for " + prefix +
                     "* (another layout or setting, or written before local steps started): the outer step "
                     "restarts from its parameters with zero momentum\n";
    return;
  }
  try {
    outer_->restore(outer);
  } catch (const std::exception& e) {
    throw InputError(path + ": /error_feedback: " + e.what());
  }
}

void RankTrainer::start_from(RunInputs& inputs) {
  restore_weights(stage_, with_.backend, *inputs.init, inputs.init_path);
  inputs.init.reset();
  resume_notes_ = "initialised from " + inputs.init_path + " (weights only: step 0, fresh optimizer; its model: " +
                  shape_text(inputs.model) + ", " + (inputs.model.tied_head ? "tied" : "untied") + " head)\n";
}

bool RankTrainer::checkpoint_at(int step, bool last) {
  const auto start = Clock::now();
  timeline_.pause(true);
  // Every rank must take the same decision: the signal may reach some only.
  // The same sum says whether any rank still writes the checkpoint in flight.
  double flags[2] = {termination_requested() ? 1.0 : 0.0, with_.checkpoints->writing() ? 1.0 : 0.0};
  with_.collectives.sum_over_pipeline_values(flags, 2);
  with_.collectives.sum_data_parallel_values(flags, 2);
  const bool stop = flags[0] > 0 && !last;
  if (checkpoint_in_flight_ > 0 && flags[1] == 0) {  // no rank writes: the next phase, or visible
    const std::string path = with_.checkpoints->advance();
    if (!path.empty()) report_checkpoint(path);
  }
  bool saved = false;
  if (stop || last || (config_.checkpoint.every_steps > 0 && (step + 1) % config_.checkpoint.every_steps == 0)) {
    publish_checkpoint();  // the next checkpoint waits for the one in flight
    save(step + 1);
    saved = true;
    checkpoint_in_flight_ = step + 1;
    // Synchronous writes, a stop and the end of training wait for this one.
    if (!config_.checkpoint.asynchronous || stop || last) publish_checkpoint();
  }
  timeline_.pause(false);
  // A save at this step: what it sent (the single form's gather to rank 0).
  timeline_.record(io::EventKind::checkpoint, start, Clock::now(), -1,
                   saved ? with_.checkpoints->sent_bytes() : 0, saved ? with_.checkpoints->sent_to() : -1);
  return stop;
}

void RankTrainer::report_checkpoint(const std::string& path) {
  result_.last_checkpoint = path;
  progress_.checkpoint(std::exchange(checkpoint_in_flight_, 0), path);
}

void RankTrainer::save(int completed_steps) {
  io::Checkpoint metadata;
  metadata.completed_steps = completed_steps;
  metadata.global_batch_sequences = static_cast<std::int64_t>(B_) * m_ * role_.replicas;
  metadata.sampler = data_.state();
  metadata.model = model_;
  metadata.config_text = io::describe(config_);
  metadata.layout_text = describe(layout_);
  metadata.plan_text = role_.plan_text;
  metadata.tokenizer_text = tokenizer_text_;
  metadata.residual_layout = residual_layout();
  for (auto& [part, residual] : with_.collectives.gradient_residuals()) {
    if (residual.empty()) continue;
    const int count = static_cast<int>(residual.size());
    metadata.residuals.push_back({residual_prefix() + part, {count}, std::move(residual), {}, {}});
  }
  if (outer_) add_local_state(metadata);
  std::vector<io::CheckpointTensor> tensors;
  if (role_.replica == writing_replica(role_.stage, role_.replicas)) {
    // On the CPU the write reads the live state (the next optimizer step waits for it) unless a
    // snapshot is asked for.
    tensors = collect_tensors(stage_, optimizer_, with_.backend, role_.stages > 1 && role_.spec.has_head,
                              !config_.checkpoint.snapshot);
    if (with_.tensor_group != nullptr) tensors = whole_tensors(stage_, std::move(tensors), *with_.tensor_group);
    borrowed_ = std::any_of(tensors.begin(), tensors.end(),
                            [](const io::CheckpointTensor& t) { return t.borrowed_value != nullptr; });
  }
  with_.checkpoints->save(std::move(metadata), std::move(tensors));
}

void RankTrainer::add_local_state(io::Checkpoint& metadata) {
  const std::size_t count = stage_.parameter_count();
  auto add = [&](const std::string& part, std::vector<float> values) {
    const int size = static_cast<int>(values.size());
    metadata.residuals.push_back({residual_prefix() + std::string(kLocalState) + part, {size}, std::move(values), {}, {}});
  };
  for (auto [part, device] : {std::pair{"params", stage_.params()}, std::pair{"m", optimizer_.first_moment()},
                              std::pair{"v", optimizer_.second_moment()}}) {
    std::vector<float> host(count);
    with_.backend.download(host.data(), device, count);
    add(part, std::move(host));
  }
  for (auto& [part, values] : outer_->state()) add(part, std::move(values));
}

}  // namespace geotrain::runtime
