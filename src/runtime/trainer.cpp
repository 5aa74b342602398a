#include "geotrain/runtime/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <ostream>
#include <utility>

#include "geotrain/common/errors.hpp"
#include "rank_trainer.hpp"
#include "termination.hpp"

namespace geotrain::runtime {
namespace {

model::OptimizerSettings optimizer_settings(const io::Config& c) {
  model::OptimizerSettings s;
  s.kind = c.optimizer.kind;
  s.learning_rate = c.optimizer.learning_rate;
  s.min_learning_rate_fraction = c.optimizer.min_learning_rate_fraction;
  s.warmup_steps = c.optimizer.warmup_steps;
  s.total_steps = c.optimizer.decay_steps > 0 ? c.optimizer.decay_steps : c.train.steps;
  s.beta1 = c.optimizer.beta1;
  s.beta2 = c.optimizer.beta2;
  s.epsilon = c.optimizer.epsilon;
  s.weight_decay = c.optimizer.weight_decay;
  s.gradient_clip = c.optimizer.gradient_clip;
  return s;
}

// A sum over every rank of the job: over the replica's stages, then over
// the replicas.
double sum_over_job(Collectives& collectives, double value) {
  return collectives.sum_data_parallel_value(collectives.sum_over_pipeline(value));
}

// Mean and minimum over the job's ranks of compute time / step time.
RunEnd run_end(const TrainResult& r) {
  RunEnd e;
  e.steps = r.first_step + static_cast<int>(r.step_loss.size());
  e.initial_validation_loss = r.initial_validation_loss;
  e.final_validation_loss = r.final_validation_loss;
  e.tokens_per_s = r.tokens_per_second;
  e.stopped = r.stopped_by_signal;
  e.replicas_identical = r.replicas_identical;
  const auto& u = r.compute_utilisation;
  if (!u.empty()) {
    double sum = 0;
    for (double value : u) sum += value;
    const auto lowest = std::min_element(u.begin(), u.end());
    e.utilisation_mean = sum / static_cast<double>(u.size());
    e.utilisation_min = *lowest;
    e.utilisation_min_rank = static_cast<int>(lowest - u.begin());
  }
  return e;
}

}  // namespace

int activation_slots(const io::Config& c, int micro_batches_per_flush, int stages) {
  if (c.pipeline.flushless) return plan::flushless_slots(stages, c.pipeline.flushless_ahead);
  return plan::activation_slots(c.pipeline.schedule, micro_batches_per_flush, stages);
}

RankTrainer::RankTrainer(RunInputs& inputs, const RankRole& role, const RankConnections& with, std::ostream& log)
    : config_(inputs.config),
      model_(inputs.model),
      role_(role),
      with_(with),
      progress_(config_, log, role.reports, peak_tflops(config_, with.backend.description())),
      data_(*inputs.data),
      layout_(inputs.layout),
      B_(layout_.micro_batch_sequences),
      T_(model_.sequence_length),
      m_(layout_.micro_batches),
      flushes_(layout_.flushes()),
      stage_(model_, role.spec, with.backend, B_,
             activation_slots(config_, m_ / flushes_, role.stages), with.tensor_group,
             config_.device.activation_storage),
      optimizer_(with.backend, initialized(stage_, config_.train.seed), optimizer_settings(config_)),
      pipeline_(stage_, with.backend, config_.pipeline.schedule, role.stage, role.stages, m_, flushes_),
      inputs_(m_),
      targets_(m_),
      tokenizer_text_(inputs.tokenizer_text),
      sample_prompt_(inputs.sample_prompt) {
  with.backend.set_matmul_precision(config_.device.matmul_precision);
  data_.set_replica(role.replica, role.replicas);
  if (static_cast<std::size_t>(role.rank) < config_.emulation.compute_slowdown.size()) {
    pipeline_.set_compute_slowdown(config_.emulation.compute_slowdown[static_cast<std::size_t>(role.rank)]);
  }
  result_.tokens_per_step = static_cast<double>(B_) * T_ * m_ * role.replicas;
  if (inputs.resume) resume_from(*inputs.resume, inputs.resume_path);
  if (inputs.init) start_from(inputs);
  if (config_.pipeline.flushless) start_flushless();
  if (local_phase()) {
    start_outer_optimizer();
    if (inputs.resume) restore_local_state(*inputs.resume, inputs.resume_path);
  }
  arrange_per_step_sums();
  if (config_.train.sample_every_steps > 0) {
    tokenizer_ = io::tokenizer_from_text(tokenizer_text_, config_.data.train);
    sampler_.emplace(stage_, pipeline_, with.backend, role.stage, role.stages);
  }
  if (with.checkpoints) watch_for_termination();
}

TrainResult RankTrainer::run() {
  count_parameters();
  result_.initial_validation_loss = validation();
  result_.validation_step.push_back(result_.first_step);
  result_.validation_loss.push_back(result_.initial_validation_loss);
  if (local_steps()) {
    progress_.text() << "local steps: " << config_.outer.local_steps << " inner steps per synchronisation, outer "
                     << "Nesterov lr " << config_.outer.learning_rate << " momentum " << config_.outer.momentum
                     << "; " << fragment_schedule(local_steps_settings(), 3)
                     << (config_.outer.synchronous_steps > 0
                             ? " (counted from the end of the first " + std::to_string(config_.outer.synchronous_steps) +
                                   " steps, synchronous)"
                             : std::string())
                     << "\n";
  }
  progress_.text() << "validation " << (resumed_ ? "at the checkpoint" : "before training") << ": loss "
                   << result_.initial_validation_loss << "\n"
                   << resume_notes_;
  start_timeline();
  run_start_ = Clock::now();
  for (int step = result_.first_step; step < config_.train.steps; ++step) {
    if (versions_) train_slice(step);
    else train_step(step);
    const bool last = step + 1 == config_.train.steps;
    if (last || (config_.train.eval_every_steps > 0 && (step + 1) % config_.train.eval_every_steps == 0)) validate_at(step, last);
    if (sampler_ && (step + 1) % config_.train.sample_every_steps == 0) sample_at(step);
    if (with_.checkpoints && checkpoint_at(step, last)) {
      result_.stopped_by_signal = true;
      result_.stop_signal_name = termination_signal_name();
      break;
    }
  }
  if (with_.checkpoints) publish_checkpoint();  // (the loop's last step already waited; kept for safety)
  summarize();
  progress_.end(run_end(result_));
  return std::move(result_);
}

void RankTrainer::start_outer_optimizer() {
  outer_.emplace(with_.backend, stage_, with_.collectives, local_steps_settings());
  if (config_.outer.fragments > 1) pipeline_.set_poll([this] { outer_->progress(); });
}

void RankTrainer::arrange_per_step_sums() {
  buckets_.reset();
  pipeline_.set_gradient_ready({});
  if (per_step_replicas() > 1 && config_.network.gradient_bucket_mb > 0) {
    const auto bucket_floats = static_cast<std::size_t>(config_.network.gradient_bucket_mb * (1 << 20) / sizeof(float));
    buckets_.emplace(per_step_sums(), with_.backend, stage_.parameter_count(), bucket_floats);
    pipeline_.set_gradient_ready(
        [this](std::size_t begin, std::size_t end) { buckets_->ready(stage_.grads(), begin, end); });
  }
}

void RankTrainer::after_inner_step(int completed_steps) {
  if (outer_) {
    outer_->after_inner_step(completed_steps - config_.outer.synchronous_steps,
                             completed_steps == config_.train.steps, &timeline_);
  } else if (local_steps() && completed_steps == config_.outer.synchronous_steps) {
    with_.collectives.forget_data_parallel_residuals();
    start_outer_optimizer();
    arrange_per_step_sums();
    progress_.text() << "local steps start after step " << completed_steps << "\n";
  }
}

double RankTrainer::sum_over_job(double value) {
  double sum = runtime::sum_over_job(with_.collectives, value);
  if (with_.tensor_group != nullptr) with_.tensor_group->sum_values(&sum, 1);
  return sum;
}

LocalStepsSettings RankTrainer::local_steps_settings() {
  LocalStepsSettings s{config_.outer.local_steps, config_.outer.fragments, config_.outer.learning_rate,
                       config_.outer.momentum, role_.replicas};
  const model::ParameterView* wte = stage_.find("wte");
  if (splits_tied_embedding() && wte != nullptr) {
    if (wte->offset != 0) throw std::logic_error("the tied embedding must be the stage's first parameter");
    s.tied_values = wte->count;
  }
  return s;
}

void RankTrainer::start_timeline() {
  pipeline_.set_timeline(&timeline_);
  if (config_.timing.file.empty()) return;
  sum_over_job(0.0);  // a barrier: every rank's clock starts together
  timeline_.start(role_.rank, config_.timing.max_event_steps);
}

void RankTrainer::train_step(int step) {
  timeline_.set_step(step + 1);
  const auto step_start = Clock::now();
  std::vector<MicroBatch> batches;
  for (int i = 0; i < m_; ++i) {
    data_.next_batch(B_, T_, inputs_[i], targets_[i]);  // every stage draws, so all stay in step
    batches.push_back({inputs_[i].data(), targets_[i].data()});
  }
  stage_.zero_grads();
  timeline_.record(io::EventKind::data, step_start, Clock::now());
  // Local steps: each replica's gradient is the mean over its own tokens
  // (or its site's replicas' tokens), not summed over all replicas.
  const int summed_replicas = per_step_replicas();
  Collectives& step_sums = per_step_sums();
  const double tokens = result_.tokens_per_step * summed_replicas / role_.replicas;
  double job_loss = pipeline_.run(batches, with_.links, static_cast<float>(1.0 / tokens));
  const auto sync_start = Clock::now();
  // The loss rides with the gradient and the norm: no exchange of its own.
  const double norm = synchronize_gradients(stage_, with_.backend, step_sums, role_.stages, summed_replicas,
                                            &job_loss, &timeline_, buckets_ ? &*buckets_ : nullptr);
  if (borrowed_) {  // the checkpoint being written reads the parameters and moments the optimizer changes
    const auto wait_start = Clock::now();
    with_.checkpoints->await_local_write();
    borrowed_ = false;
    timeline_.record(io::EventKind::checkpoint, wait_start, Clock::now());
  }
  const Update update = apply_optimizer(step, norm);
  const double loss = checked_loss(step, job_loss, summed_replicas);
  record_step(step, loss, update.learning_rate, norm, seconds_since(step_start),
              seconds_between(sync_start, update.optimizer_start) + update.outer_s, update.optimizer_s,
              pipeline_.times());
}

RankTrainer::Update RankTrainer::apply_optimizer(int step, double norm) {
  Update update;
  update.optimizer_start = Clock::now();
  update.learning_rate = optimizer_.step(step, norm);
  with_.backend.synchronize();
  const auto optimizer_end = Clock::now();
  timeline_.record(io::EventKind::optimizer, update.optimizer_start, optimizer_end);
  after_inner_step(step + 1);
  update.optimizer_s = seconds_between(update.optimizer_start, optimizer_end);
  update.outer_s = seconds_since(optimizer_end);
  return update;
}

double RankTrainer::checked_loss(int step, double job_loss, int summed_replicas) const {
  // With local steps: this replica's loss (the others' would cost an exchange per step).
  const double loss = job_loss / (static_cast<double>(m_) * summed_replicas);
  if (!std::isfinite(loss)) {
    throw RunError("train: loss became " + std::to_string(loss) + " at step " + std::to_string(step + 1) +
                   " (lower optimizer.learning_rate?)");
  }
  return loss;
}

void RankTrainer::record_step(int step, double loss, double lr, double norm, double step_s, double sync_s, double optimizer_s, const StageTimes& times) {
  result_.step_loss.push_back(loss);
  result_.step_learning_rate.push_back(lr);
  result_.step_grad_norm.push_back(norm);
  result_.step_seconds.push_back(step_s);
  // The first step of a run warms caches and connections: not timed, unless it is the only one.
  if (step > result_.first_step || config_.train.steps == result_.first_step + 1) {
    own_.step_s += step_s;
    own_.compute_s += times.compute_s;
    own_.pipeline_s += times.pipeline_s;
    own_.data_parallel_s += sync_s;
    own_.optimizer_s += optimizer_s;
  }
  StepReport report;
  report.step = step + 1;
  report.loss = loss;
  report.learning_rate = lr;
  report.grad_norm = norm;
  report.step_s = step_s;
  report.tokens_per_step = result_.tokens_per_step;
  report.model_flops_per_token = result_.model_flops_per_token;
  report.compute_s = times.compute_s;
  report.eta_s = remaining_seconds(seconds_since(run_start_), result_.first_step, step, config_.train.steps);
  progress_.step(report);
}

void RankTrainer::validate_at(int step, bool last) {
  const auto start = Clock::now();
  timeline_.pause(true);
  const double v = validation();
  timeline_.pause(false);
  timeline_.record(io::EventKind::evaluate, start, Clock::now());
  if (last) result_.final_validation_loss = v;
  result_.validation_step.push_back(step + 1);
  result_.validation_loss.push_back(v);
  progress_.validation(step + 1, v);
}

void RankTrainer::sample_at(int step) {
  const auto start = Clock::now();
  timeline_.pause(true);
  SamplingSettings settings;
  settings.tokens = config_.train.sample_tokens;
  settings.temperature = config_.train.sample_temperature;
  settings.seed = config_.train.seed;
  settings.token_limit = tokenizer_->vocabulary();
  const std::vector<int> tokens = sampler_->generate(sample_prompt_, settings, with_.links, with_.collectives);
  timeline_.pause(false);
  timeline_.record(io::EventKind::evaluate, start, Clock::now());
  if (role_.reports) progress_.sample(step + 1, tokenizer_->decode(tokens), tokens);
}

double flops_per_token(const ModelShape& m, double parameters) {
  return 6.0 * parameters + 12.0 * m.layers * m.hidden * static_cast<double>(m.sequence_length);
}

double remaining_seconds(double elapsed_s, int first_step, int step, int train_steps) {
  // This run's pace: a resumed run has done step + 1 - first_step steps so far.
  return elapsed_s / (step + 1 - first_step) * (train_steps - step - 1);
}

TrainResult train(RunInputs& inputs, const RankRole& role, const RankConnections& with, std::ostream& log) {
  return RankTrainer(inputs, role, with, log).run();
}

std::string final_summary(const TrainResult& result) {
  const RunEnd e = run_end(result);
  char line[240];
  std::snprintf(line, sizeof line,
                "final validation loss %.6f (before training %.6f), %.0f tokens/s, compute utilisation %.1f%% "
                "(mean over ranks; lowest %.1f%%, rank %d)\n",
                result.final_validation_loss, result.initial_validation_loss, result.tokens_per_second,
                100 * e.utilisation_mean, 100 * e.utilisation_min, e.utilisation_min_rank);
  return line;
}

std::string stopped_summary(const TrainResult& result) {
  return "geotrain: stopped by " + result.stop_signal_name + " after step " +
         std::to_string(result.first_step + static_cast<int>(result.step_loss.size())) + "; checkpoint " +
         result.last_checkpoint + "; run again with --checkpoint.resume=auto to continue\n";
}

TrainResult train_single_rank(RunInputs& inputs, std::ostream& log) {
  const io::Config& config = inputs.config;
  const std::unique_ptr<kernels::Backend> backend = kernels::make_backend(config.device.kind);
  NoLinks no_links;
  LocalCollectives collectives;
  std::optional<LocalCheckpointSink> sink;
  if (!config.checkpoint.dir.empty()) {
    sink.emplace(config.checkpoint.dir, config.checkpoint.keep,
                 writes_folder(resolve_checkpoint_form(config.checkpoint.form, CheckpointPremises{})));
  }
  RankRole role;
  role.spec = model::StageSpec::whole(inputs.model);
  return train(inputs, role, {*backend, no_links, collectives, sink ? &*sink : nullptr}, log);
}

}  // namespace geotrain::runtime
