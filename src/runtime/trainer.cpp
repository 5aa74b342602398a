#include "geotrain/runtime/trainer.hpp"

#include <chrono>
#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <ostream>
#include <string_view>
#include <utility>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/tokenizer.hpp"
#include "geotrain/runtime/evaluation.hpp"
#include "geotrain/runtime/gradient_buckets.hpp"
#include "geotrain/runtime/local_steps.hpp"
#include "geotrain/runtime/progress_log.hpp"
#include "geotrain/runtime/sampler.hpp"
#include "geotrain/runtime/weight_versions.hpp"
#include "geotrain/io/token_shard.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/optimizer.hpp"
#include "geotrain/plan/memory_model.hpp"

namespace geotrain::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Names of the local-steps state among a rank's per-rank checkpoint tensors.
constexpr std::string_view kLocalState = "local_steps.";

// Resuming on another number of replicas changes the sequences per step,
// hence the loss curve, unless the micro-batches per replica change with it:
// say so, and which setting keeps the checkpoint's batch ("" when equal).
std::string batch_change_note(std::int64_t checkpoint_batch, int micro_batch, int micro_batches, int replicas) {
  const std::int64_t per_micro_batch_round = static_cast<std::int64_t>(micro_batch) * replicas;
  const std::int64_t batch = per_micro_batch_round * micro_batches;
  if (checkpoint_batch <= 0 || checkpoint_batch == batch) return "";
  std::string note = "note: the checkpoint's run took " + std::to_string(checkpoint_batch) +
                     " sequences per step, this one takes " + std::to_string(batch) + " (" + std::to_string(replicas) +
                     " replicas x " + std::to_string(micro_batches) + " micro-batches x " + std::to_string(micro_batch) +
                     "): the loss curve will differ";
  if (checkpoint_batch % per_micro_batch_round == 0) {
    note += "; --train.gradient_accumulation=" + std::to_string(checkpoint_batch / per_micro_batch_round) +
            " keeps the checkpoint's batch";
  }
  return note + "\n";
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

model::OptimizerSettings optimizer_settings(const io::Config& c) {
  model::OptimizerSettings s;
  s.kind = c.optimizer_kind;
  s.learning_rate = c.learning_rate;
  s.min_learning_rate_fraction = c.min_learning_rate_fraction;
  s.warmup_steps = c.warmup_steps;
  s.total_steps = c.decay_steps > 0 ? c.decay_steps : c.train_steps;
  s.beta1 = c.beta1;
  s.beta2 = c.beta2;
  s.epsilon = c.epsilon;
  s.weight_decay = c.weight_decay;
  s.gradient_clip = c.gradient_clip;
  return s;
}

// The value of `key` in a describe() text ("" when absent).
std::string described_value(const std::string& text, const std::string& key) {
  const std::string prefix = key + " = ";
  std::size_t at = text.rfind("\n" + prefix) != std::string::npos ? text.rfind("\n" + prefix) + 1 : std::string::npos;
  if (text.rfind(prefix, 0) == 0) at = 0;
  if (at == std::string::npos) return "";
  const std::size_t begin = at + prefix.size();
  return text.substr(begin, text.find('\n', begin) - begin);
}

// A resumed run whose train.steps differs from the checkpoint's stretches
// the cosine schedule unless optimizer.decay_steps pins it: say so.
std::string schedule_change_note(const io::Checkpoint& checkpoint, const io::Config& config) {
  if (config.decay_steps > 0) return "";
  const std::string before = described_value(checkpoint.config_text, "train.steps");
  const std::string decay = described_value(checkpoint.config_text, "optimizer.decay_steps");
  const std::string was = !decay.empty() && decay != "0" ? decay : before;
  if (was.empty() || was == std::to_string(config.train_steps)) return "";
  return "note: the learning-rate schedule decayed over " + was + " steps in the checkpoint's run and now over " +
         std::to_string(config.train_steps) + " (train.steps); --optimizer.decay_steps=" + was + " keeps it\n";
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

// Activation sets a stage keeps: its schedule's, or the flushless stream's.
int activation_slots(const io::Config& c, int micro_batches_per_flush, int stages) {
  if (c.pipeline_flushless) return plan::flushless_slots(stages, c.pipeline_flushless_ahead);
  return plan::activation_slots(c.pipeline_schedule, micro_batches_per_flush, stages);
}

// The signal that asked this rank to stop (0: none).
volatile std::sig_atomic_t termination_requested = 0;
extern "C" void request_termination(int signal_number) {
  // A second Ctrl-C means now: no checkpoint.
  if (signal_number == SIGINT && termination_requested == SIGINT) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
  termination_requested = signal_number;
}

// The training loop of one rank, step by step: the stage it holds, its
// optimizer and pipeline program, and what it has measured so far.
class RankTrainer {
 public:
  RankTrainer(RunInputs& inputs, const RankRole& role, const RankConnections& with, std::ostream& log)
      : config_(inputs.config),
        model_(inputs.model),
        role_(role),
        with_(with),
        progress_(config_, log, role.reports, peak_tflops(config_, with.backend.description())),
        data_(*inputs.data),
        B_(config_.micro_batch_sequences),
        T_(model_.sequence_length),
        m_(config_.gradient_accumulation),
        flushes_(config_.micro_batches_per_flush > 0 ? m_ / config_.micro_batches_per_flush : 1),
        stage_(model_, role.spec, with.backend, B_,
               activation_slots(config_, m_ / flushes_, role.stages), with.tensor_group,
               config_.activation_storage),
        optimizer_(with.backend, initialized(stage_, config_.seed), optimizer_settings(config_)),
        pipeline_(stage_, with.backend, config_.pipeline_schedule, role.stage, role.stages, m_, flushes_),
        inputs_(m_),
        targets_(m_),
        tokenizer_text_(inputs.tokenizer_text),
        sample_prompt_(inputs.sample_prompt) {
    with.backend.set_matmul_precision(config_.matmul_precision);
    data_.set_replica(role.replica, role.replicas);
    if (static_cast<std::size_t>(role.rank) < config_.compute_slowdown.size()) {
      pipeline_.set_compute_slowdown(config_.compute_slowdown[static_cast<std::size_t>(role.rank)]);
    }
    result_.tokens_per_step = static_cast<double>(B_) * T_ * m_ * role.replicas;
    if (inputs.resume) resume_from(*inputs.resume, inputs.resume_path);
    if (inputs.init) start_from(inputs);
    if (config_.pipeline_flushless) start_flushless();
    if (local_phase()) {
      start_outer_optimizer();
      if (inputs.resume) restore_local_state(*inputs.resume, inputs.resume_path);
    }
    arrange_per_step_sums();
    if (config_.sample_every_steps > 0) {
      tokenizer_ = io::tokenizer_from_text(tokenizer_text_, config_.data_train);
      sampler_.emplace(stage_, pipeline_, with.backend, role.stage, role.stages);
    }
    if (with.checkpoints) {
      termination_requested = 0;
      std::signal(SIGTERM, request_termination);  // Slurm's pre-emption notice: checkpoint, then stop
      std::signal(SIGINT, request_termination);   // Ctrl-C: the same (twice: at once, no checkpoint)
    }
  }

  TrainResult run() {
    count_parameters();
    result_.initial_validation_loss = validation();
    result_.validation_step.push_back(result_.first_step);
    result_.validation_loss.push_back(result_.initial_validation_loss);
    if (local_steps()) {
      progress_.text() << "local steps: " << config_.outer_local_steps << " inner steps per synchronisation, outer "
                       << "Nesterov lr " << config_.outer_learning_rate << " momentum " << config_.outer_momentum
                       << "; " << fragment_schedule(local_steps_settings(), 3)
                       << (config_.outer_synchronous_steps > 0
                               ? " (counted from the end of the first " + std::to_string(config_.outer_synchronous_steps) +
                                     " steps, synchronous)"
                               : std::string())
                       << "\n";
    }
    progress_.text() << "validation " << (resumed_ ? "at the checkpoint" : "before training") << ": loss "
                     << result_.initial_validation_loss << "\n"
                     << resume_notes_;
    start_timeline();
    run_start_ = Clock::now();
    for (int step = result_.first_step; step < config_.train_steps; ++step) {
      if (versions_) train_slice(step);
      else train_step(step);
      const bool last = step + 1 == config_.train_steps;
      if (last || (config_.eval_every_steps > 0 && (step + 1) % config_.eval_every_steps == 0)) validate_at(step, last);
      if (sampler_ && (step + 1) % config_.sample_every_steps == 0) sample_at(step);
      if (with_.checkpoints && checkpoint_at(step, last)) {
        result_.stopped_by_signal = true;
        result_.stop_signal_name = termination_requested == SIGINT ? "SIGINT" : "SIGTERM";
        break;
      }
    }
    if (with_.checkpoints) publish_checkpoint();  // (the loop's last step already waited; kept for safety)
    summarize();
    progress_.end(run_end(result_));
    return std::move(result_);
  }

 private:
  bool local_steps() const { return config_.outer_local_steps > 0; }
  // The replicas whose gradients are summed every step, and over which
  // collectives: all of them until local steps start (outer.synchronous_steps).
  int per_step_replicas() const {
    return !outer_ ? role_.replicas : with_.within_site ? role_.site_replicas : 1;
  }
  Collectives& per_step_sums() const { return outer_ && with_.within_site ? *with_.within_site : with_.collectives; }

  // Local steps have started (or start with this run's first step): true
  // from the outer step's construction; before it, what the step resumed at says.
  bool local_phase() const {
    return outer_.has_value() || (local_steps() && result_.first_step >= config_.outer_synchronous_steps);
  }

  // The outer step's anchor is the parameters as local steps start.
  void start_outer_optimizer() {
    outer_.emplace(with_.backend, stage_, with_.collectives, local_steps_settings());
    if (config_.outer_fragments > 1) pipeline_.set_poll([this] { outer_->progress(); });
  }

  // The per-step sum (all replicas; with local steps, a site's) overlaps the
  // last backward. With sites it runs on the site's own communicator, so its
  // buckets never meet the outer exchange's fragments.
  void arrange_per_step_sums() {
    buckets_.reset();
    pipeline_.set_gradient_ready({});
    if (per_step_replicas() > 1 && config_.gradient_bucket_mb > 0) {
      const auto bucket_floats = static_cast<std::size_t>(config_.gradient_bucket_mb * (1 << 20) / sizeof(float));
      buckets_.emplace(per_step_sums(), with_.backend, stage_.parameter_count(), bucket_floats);
      pipeline_.set_gradient_ready(
          [this](std::size_t begin, std::size_t end) { buckets_->ready(stage_.grads(), begin, end); });
    }
  }

  // After the inner step that completed `completed_steps`: the outer step's
  // turn, or, at the end of the synchronous start, local steps begin.
  void after_inner_step(int completed_steps) {
    if (outer_) {
      outer_->after_inner_step(completed_steps - config_.outer_synchronous_steps,
                               completed_steps == config_.train_steps, &timeline_);
    } else if (local_steps() && completed_steps == config_.outer_synchronous_steps) {
      with_.collectives.forget_data_parallel_residuals();
      start_outer_optimizer();
      arrange_per_step_sums();
      progress_.text() << "local steps start after step " << completed_steps << "\n";
    }
  }

  // A sum over every rank of the job: the replica's stages, the replicas,
  // then the tensor-parallel unit.
  double sum_over_job(double value) {
    double sum = runtime::sum_over_job(with_.collectives, value);
    if (with_.tensor_group != nullptr) with_.tensor_group->sum_values(&sum, 1);
    return sum;
  }

  LocalStepsSettings local_steps_settings() {
    LocalStepsSettings s{config_.outer_local_steps, config_.outer_fragments, config_.outer_learning_rate,
                         config_.outer_momentum, role_.replicas};
    const model::ParameterView* wte = stage_.find("wte");
    if (splits_tied_embedding() && wte != nullptr) {
      if (wte->offset != 0) throw std::logic_error("the tied embedding must be the stage's first parameter");
      s.tied_values = wte->count;
    }
    return s;
  }

  // FNV-1a of `count` parameters from `offset` (the whole stage by default; ranks of one stage must agree
  // bit for bit, and so must a pipeline's two copies of a tied embedding).
  std::uint64_t parameter_fingerprint(std::size_t offset = 0, std::size_t count = 0) {
    std::vector<float> host(count ? count : stage_.parameter_count());
    with_.backend.download(host.data(), stage_.params() + offset, host.size());
    std::uint64_t hash = 1469598103934665603ull;
    const auto* bytes = reinterpret_cast<const unsigned char*>(host.data());
    for (std::size_t i = 0; i < host.size() * sizeof(float); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
    return hash;
  }

  // Parameters are drawn before the optimizer sees the stage.
  static model::Stage& initialized(model::Stage& stage, std::uint64_t seed) {
    stage.initialize(seed);
    return stage;
  }

  void resume_from(const io::Checkpoint& checkpoint, const std::string& path) {
    restore_tensors(stage_, optimizer_, with_.backend, checkpoint, path);
    data_.restore(checkpoint.sampler);
    result_.first_step = static_cast<int>(checkpoint.completed_steps);
    resumed_ = true;
    resume_notes_ = "resumed from " + path + " after step " + std::to_string(result_.first_step) + "\n" +
                    batch_change_note(checkpoint.global_batch_sequences, B_, m_, role_.replicas) +
                    schedule_change_note(checkpoint, config_);
    restore_residuals(checkpoint, path);
    if (!config_.checkpoint_init_from.empty()) {
      resume_notes_ += "note: checkpoint.init_from (" + config_.checkpoint_init_from +
                       ") not used: this run continues from its own checkpoint\n";
    }
  }

  // The tied embedding's gradient is summed between a pipeline's two ends (on every rank: the same answer).
  bool splits_tied_embedding() const { return role_.stages > 1 && model_.tied_head; }
  bool tied_embedding_encoded() const {
    return splits_tied_embedding() && config_.tied_embedding_wire != WireFormat::fp32;
  }

  // What the error-feedback residuals depend on besides the pipeline cut
  // (which their names carry): the same string, the same meaning.
  std::string residual_layout() const {
    return to_string(config_.gradient_wire) +
           (tied_embedding_encoded() ? " tied_embedding=" + to_string(config_.tied_embedding_wire) : std::string()) +
           " group_size=" + std::to_string(config_.compression_group_size) +
           " topk_fraction=" + std::to_string(config_.compression_topk_fraction) +
           " bucket_mb=" + std::to_string(config_.gradient_bucket_mb) +
           " replicas=" + std::to_string(role_.replicas) +
           // Before local steps start, the residuals are the per-step sums' buckets', not the fragments'.
           (local_steps() && !local_phase() ? std::string(" synchronous_start") : std::string()) +
           (local_steps() ? " local_steps=" + std::to_string(config_.outer_local_steps) +
                                " fragments=" + std::to_string(config_.outer_fragments) +
                                (with_.within_site ? " within_site=" + std::to_string(role_.site_replicas) : "")
                          : std::string());
  }

  std::string residual_prefix() const {
    const model::StageSpec& spec = role_.spec;
    return "layers_" + std::to_string(spec.first_layer) + "-" + std::to_string(spec.last_layer) +
           (spec.tensor_parallel > 1
                ? ".tensor_" + std::to_string(spec.tensor_rank) + "_of_" + std::to_string(spec.tensor_parallel)
                : std::string()) +
           ".replica_" + std::to_string(role_.replica) + ".";
  }

  // This rank's residuals from the checkpoint when it was written for the
  // same wire format, replicas and pipeline cut; otherwise they start at zero.
  void restore_residuals(const io::Checkpoint& checkpoint, const std::string& path) {
    const bool gradient_residuals = config_.gradient_wire != WireFormat::fp32 && role_.replicas > 1;
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

  // Local steps: this replica's own parameters and inner moments (replicas
  // differ between synchronisations) and the outer optimizer's state, from
  // a checkpoint of the same layout and settings; otherwise the outer step
  // restarts from the checkpoint's parameters with zero momentum.
  void restore_local_state(const io::Checkpoint& checkpoint, const std::string& path) {
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

  // Weights only: the optimizer's moments stay zero, the step and the data
  // sampler at their start. The file's copy is freed once on the device.
  void start_from(RunInputs& inputs) {
    restore_weights(stage_, with_.backend, *inputs.init, inputs.init_path);
    inputs.init.reset();
    resume_notes_ = "initialised from " + inputs.init_path + " (weights only: step 0, fresh optimizer)\n";
  }

  // The tied embedding lives on the first and the last stage: counted once.
  void count_parameters() {
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
         << "  " << config_.train_steps << " steps x " << role_.replicas << " replicas x " << m_ << " micro-batches"
         << (flushes_ > 1 ? " (" + std::to_string(flushes_) + " flushes)" : std::string()) << " x " << B_
         << " sequences x " << T_ << " tokens; data " << config_.data_train << "\n";
    report_memory();
  }

  // The reporting rank's device memory for its stage, optimizer and pipeline
  // buffers, from the planner's memory model (tests/model/test_memory_model.cpp
  // holds it equal to what they allocate without tensor parallelism).
  void report_memory() {
    plan::MemorySettings settings;
    settings.reserved_bytes = 0;
    settings.activation_storage = config_.activation_storage;
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
                     << to_string(config_.activation_storage) << " storage, " << slots
                     << (slots == 1 ? " micro-batch" : " micro-batches") << " in flight); workspace " << mib(memory.workspace_bytes) << " MiB"
                     << (config_.pipeline_flushless
                             ? "; flushless: a second weight version and gradient buffer " +
                                   mib(2.0 * sizeof(float) * static_cast<double>(stage_.parameter_count())) + " MiB"
                             : std::string())
                     << "\n";
  }

  void start_timeline() {
    pipeline_.set_timeline(&timeline_);
    if (config_.timing_file.empty()) return;
    sum_over_job(0.0);  // a barrier: every rank's clock starts together
    timeline_.start(role_.rank, config_.timing_max_event_steps);
  }

  double validation() {
    return validation_loss(pipeline_, with_.links, with_.collectives, data_, B_, T_, config_.eval_batches,
                           role_.replicas);
  }

  void train_step(int step) {
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
    const auto optimizer_start = Clock::now();
    const double lr = optimizer_.step(step, norm);
    with_.backend.synchronize();
    const auto optimizer_end = Clock::now();
    timeline_.record(io::EventKind::optimizer, optimizer_start, optimizer_end);
    after_inner_step(step + 1);
    const double outer_s = seconds_since(optimizer_end);
    // With local steps: this replica's loss (the others' would cost an exchange per step).
    const double loss = job_loss / (static_cast<double>(m_) * summed_replicas);
    if (!std::isfinite(loss)) {
      throw RunError("train: loss became " + std::to_string(loss) + " at step " + std::to_string(step + 1) +
                     " (lower optimizer.learning_rate?)");
    }
    const double step_s = seconds_since(step_start);
    record_step(step, loss, lr, norm, step_s, seconds_between(sync_start, optimizer_start) + outer_s,
                seconds_between(optimizer_start, optimizer_end), pipeline_.times());
  }

  // pipeline.flushless: both weight versions, the gradient sums left in
  // flight, and a second set of batches (a slice runs the next step's first
  // forwards).
  void start_flushless() {
    const int ahead = config_.pipeline_flushless_ahead;
    if (m_ < plan::flushless_slots(role_.stages, ahead)) {
      throw InputError(config_.origin_of("pipeline.flushless") + ": pipeline.flushless: needs "
                       "train.gradient_accumulation >= (1 + pipeline.flushless_ahead) x (stages - 1) + 1 = " +
                       std::to_string(plan::flushless_slots(role_.stages, ahead)) + ", got " + std::to_string(m_));
    }
    pipeline_.set_flushless(ahead);
    versions_.emplace(stage_, with_.backend);
    sums_.emplace(with_.backend);
    for (int parity = 0; parity < 2; ++parity) {
      stream_inputs_[parity].assign(m_, {});
      stream_targets_[parity].assign(m_, {});
      stream_batches_[parity].assign(m_, {});
    }
  }

  void draw_batches(int step) {
    const int parity = step % 2;
    for (int i = 0; i < m_; ++i) {
      data_.next_batch(B_, T_, stream_inputs_[parity][i], stream_targets_[parity][i]);
      stream_batches_[parity][i] = {stream_inputs_[parity][i].data(), stream_targets_[parity][i].data()};
    }
  }

  // Whatever else uses the pipeline after this step (validation, sampling,
  // the end) needs it empty: the stream drains there and starts afresh.
  bool stream_stops_after(int step) const {
    return step + 1 == config_.train_steps ||
           (config_.eval_every_steps > 0 && (step + 1) % config_.eval_every_steps == 0) ||
           (sampler_ && (step + 1) % config_.sample_every_steps == 0);
  }

  // pipeline.flushless: step `step`'s slice of the unbroken 1F1B stream.
  // Its gradient sums leave at its end; its update runs in the next slice,
  // right before the first forward that reads it (the step after next), or
  // at once when the stream drains here.
  void train_slice(int step) {
    timeline_.set_step(step + 1);
    const auto slice_start = Clock::now();
    const bool fresh = !stream_running_, drains = stream_stops_after(step);
    if (fresh) draw_batches(step);
    if (!drains) draw_batches(step + 1);
    timeline_.record(io::EventKind::data, slice_start, Clock::now());
    const double tokens = result_.tokens_per_step * per_step_replicas() / role_.replicas;
    const double job_loss = pipeline_.run_flushless(
        step, stream_batches_[step % 2], stream_batches_[(step + 1) % 2], with_.links, static_cast<float>(1.0 / tokens),
        fresh, drains, [this, step](int ahead) {
          if (ahead == 1 && pending_) apply_update();
          versions_->read_for(step + ahead);
        });
    if (pending_) apply_update();  // the last stage runs no forward of the step after next
    stream_running_ = !drains;
    pending_loss_ = job_loss;
    sums_->start(stage_, with_.backend, per_step_sums(), role_.stages, per_step_replicas(), &pending_loss_, &timeline_,
                 buckets_ ? &*buckets_ : nullptr);
    versions_->set_gradient_aside();
    pending_ = PendingUpdate{step, slice_start, seconds_since(slice_start), drains, pipeline_.times()};
    if (drains) apply_update();
  }

  void apply_update() {
    const PendingUpdate p = *pending_;
    pending_.reset();
    const auto start = Clock::now();
    versions_->begin_update(p.step);
    const int summed_replicas = per_step_replicas();  // this step's, whatever after_inner_step changes
    const double norm = sums_->finish(per_step_sums(), &pending_loss_, &timeline_);
    const auto optimizer_start = Clock::now();
    const double lr = optimizer_.step(p.step, norm);
    with_.backend.synchronize();
    const auto optimizer_end = Clock::now();
    timeline_.record(io::EventKind::optimizer, optimizer_start, optimizer_end);
    after_inner_step(p.step + 1);
    const double outer_s = seconds_since(optimizer_end);
    versions_->end_update();
    const double loss = pending_loss_ / (static_cast<double>(m_) * summed_replicas);
    if (!std::isfinite(loss)) {
      throw RunError("train: loss became " + std::to_string(loss) + " at step " + std::to_string(p.step + 1) +
                     " (lower optimizer.learning_rate?)");
    }
    // A slice's time is its own; a draining slice's includes its update.
    const double step_s = p.drained ? seconds_since(p.slice_start) : p.slice_s;
    record_step(p.step, loss, lr, norm, step_s, seconds_between(start, optimizer_start) + outer_s,
                seconds_between(optimizer_start, optimizer_end), p.times);
  }

  static double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }

  void record_step(int step, double loss, double lr, double norm, double step_s, double sync_s, double optimizer_s,
                   const StageTimes& times) {
    result_.step_loss.push_back(loss);
    result_.step_learning_rate.push_back(lr);
    result_.step_grad_norm.push_back(norm);
    result_.step_seconds.push_back(step_s);
    // The first step of a run warms caches and connections: not timed, unless it is the only one.
    if (step > result_.first_step || config_.train_steps == result_.first_step + 1) {
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
    report.eta_s = remaining_seconds(seconds_since(run_start_), result_.first_step, step, config_.train_steps);
    progress_.step(report);
  }

  void validate_at(int step, bool last) {
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

  // Every stage of every replica generates (identical replicas sample
  // identically); the reporting rank prints.
  void sample_at(int step) {
    const auto start = Clock::now();
    timeline_.pause(true);
    SamplingSettings settings;
    settings.tokens = config_.sample_tokens;
    settings.temperature = config_.sample_temperature;
    settings.seed = config_.seed;
    settings.token_limit = tokenizer_->vocabulary();
    const std::vector<int> tokens = sampler_->generate(sample_prompt_, settings, with_.links, with_.collectives);
    timeline_.pause(false);
    timeline_.record(io::EventKind::evaluate, start, Clock::now());
    if (role_.reports) progress_.sample(step + 1, tokenizer_->decode(tokens), tokens);
  }

  // Returns whether the job was asked to stop (SIGTERM): checkpointed, then out.
  bool checkpoint_at(int step, bool last) {
    const auto start = Clock::now();
    timeline_.pause(true);
    // Every rank must take the same decision: the signal may reach some only.
    // The same sum says whether any rank still writes the checkpoint in flight.
    double flags[2] = {termination_requested ? 1.0 : 0.0, with_.checkpoints->writing() ? 1.0 : 0.0};
    with_.collectives.sum_over_pipeline_values(flags, 2);
    with_.collectives.sum_data_parallel_values(flags, 2);
    const bool stop = flags[0] > 0 && !last;
    if (checkpoint_in_flight_ > 0 && flags[1] == 0) {  // no rank writes: the next phase, or visible
      const std::string path = with_.checkpoints->advance();
      if (!path.empty()) report_checkpoint(path);
    }
    bool saved = false;
    if (stop || last || (config_.checkpoint_every_steps > 0 && (step + 1) % config_.checkpoint_every_steps == 0)) {
      publish_checkpoint();  // the next checkpoint waits for the one in flight
      save(step + 1);
      saved = true;
      checkpoint_in_flight_ = step + 1;
      // Synchronous writes, a stop and the end of training wait for this one.
      if (!config_.checkpoint_asynchronous || stop || last) publish_checkpoint();
    }
    timeline_.pause(false);
    // A save at this step: what it sent (the single form's gather to rank 0).
    timeline_.record(io::EventKind::checkpoint, start, Clock::now(), -1,
                     saved ? with_.checkpoints->sent_bytes() : 0, saved ? with_.checkpoints->sent_to() : -1);
    return stop;
  }

  // Waits for the checkpoint in flight, if any (collective), and reports it.
  void publish_checkpoint() {
    if (checkpoint_in_flight_ > 0) report_checkpoint(with_.checkpoints->finish());
  }

  void report_checkpoint(const std::string& path) {
    result_.last_checkpoint = path;
    progress_.checkpoint(std::exchange(checkpoint_in_flight_, 0), path);
  }

  void save(int completed_steps) {
    io::Checkpoint metadata;
    metadata.completed_steps = completed_steps;
    metadata.global_batch_sequences = static_cast<std::int64_t>(B_) * m_ * role_.replicas;
    metadata.sampler = data_.state();
    metadata.model = model_;
    metadata.config_text = io::describe(config_);
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
                                !config_.checkpoint_snapshot);
      if (with_.tensor_group != nullptr) tensors = whole_tensors(stage_, std::move(tensors), *with_.tensor_group);
      borrowed_ = std::any_of(tensors.begin(), tensors.end(),
                              [](const io::CheckpointTensor& t) { return t.borrowed_value != nullptr; });
    }
    with_.checkpoints->save(std::move(metadata), std::move(tensors));
  }

  void add_local_state(io::Checkpoint& metadata) {
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

  // The job's means, every rank's compute utilisation and a fingerprint of
  // every rank's parameters, in one exchange: each rank adds its figures,
  // and its own values at its own index.
  void summarize() {
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

  const io::Config& config_;
  const ModelShape& model_;
  const RankRole& role_;
  const RankConnections& with_;
  ProgressLog progress_;
  io::TokenDataset& data_;
  const int B_, T_, m_;
  const int flushes_;  // pipeline flushes per step (pipeline.micro_batches_per_flush)
  model::Stage stage_;
  model::AdamW optimizer_;
  PipelineStep pipeline_;
  std::optional<GradientBuckets> buckets_;  // the overlapped data-parallel sum (replicas > 1, buckets on)
  std::optional<OuterOptimizer> outer_;     // outer.local_steps > 0
  // pipeline.flushless: the weight versions, the step whose update is due
  // (its sums in flight), and the batches of the two steps in the stream.
  struct PendingUpdate {
    int step;
    Clock::time_point slice_start;
    double slice_s;
    bool drained;
    StageTimes times;
  };
  std::optional<WeightVersions> versions_;
  std::optional<GradientSums> sums_;
  std::optional<PendingUpdate> pending_;
  double pending_loss_ = 0;
  bool stream_running_ = false;
  std::array<std::vector<std::vector<int>>, 2> stream_inputs_, stream_targets_;
  std::array<std::vector<MicroBatch>, 2> stream_batches_;
  std::vector<std::vector<int>> inputs_, targets_;
  Timeline timeline_;
  TrainResult result_;
  StepBreakdown own_;  // this rank, summed over the timed steps
  bool resumed_ = false;
  int checkpoint_in_flight_ = 0;  // its step; 0: none
  bool borrowed_ = false;          // the checkpoint in flight reads this rank's live parameters and moments
  std::string resume_notes_;
  const std::string tokenizer_text_;
  const std::vector<int> sample_prompt_;
  std::unique_ptr<io::Tokenizer> tokenizer_;  // with train.sample_every_steps
  std::optional<Sampler> sampler_;
  Clock::time_point run_start_;
};

}  // namespace

double flops_per_token(const ModelShape& m, double parameters) {
  return 6.0 * parameters + 12.0 * m.layers * m.hidden * static_cast<double>(m.sequence_length);
}

double remaining_seconds(double elapsed_s, int first_step, int step, int train_steps) {
  // This run's pace: a resumed run has done step + 1 - first_step steps so far.
  return elapsed_s / (step + 1 - first_step) * (train_steps - step - 1);
}

RunInputs prepare_run(io::Config config, const ModelShape& model) {
  RunInputs inputs;
  inputs.config = std::move(config);
  inputs.model = model;
  const io::Config& c = inputs.config;
  // Before the shards: a vocabulary too small for the tokenizer is named as such, not as a stray token id.
  inputs.tokenizer_text = io::tokenizer_text_for_training(c, model.vocabulary);
  if (c.sample_every_steps > 0) {
    inputs.sample_prompt = encode_prompt(*io::tokenizer_from_text(inputs.tokenizer_text, c.data_train), c.sample_prompt,
                                         model.vocabulary, c.origin_of("train.sample_prompt") + ": train.sample_prompt");
  }
  inputs.data.emplace(io::TokenDataset::from_shards(c.data_train, c.data_validation, model.vocabulary, c.seed));
  if (!c.checkpoint_resume.empty()) inputs.resume_path = io::resolve_resume(c.checkpoint_dir, c.checkpoint_resume);
  if (inputs.resume_path.empty()) {  // no resume, or auto and nothing written yet: a fresh start
    if (!c.checkpoint_init_from.empty()) {
      inputs.init_path = c.checkpoint_init_from;
      check_checkpoint_fits(inputs.init.emplace(io::read_checkpoint(inputs.init_path)), model, inputs.init_path);
    }
    return inputs;
  }
  const io::Checkpoint& resume = inputs.resume.emplace(io::read_checkpoint(inputs.resume_path));
  if (resume.weights_only) {
    throw InputError(inputs.resume_path + ": attribute weights_only: the file holds weights only (no optimizer "
                     "state, e.g. from geotrain convert): start from it with checkpoint.init_from, not checkpoint.resume");
  }
  check_checkpoint_fits(resume, model, inputs.resume_path);
  if (resume.completed_steps >= c.train_steps) {
    throw InputError(c.origin_of("train.steps") + ": train.steps: is " + std::to_string(c.train_steps) + " but " +
                     inputs.resume_path + " has already trained " + std::to_string(resume.completed_steps) +
                     " steps: nothing left to train (raise train.steps to continue)");
  }
  return inputs;
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
  const std::unique_ptr<kernels::Backend> backend = kernels::make_backend(config.device);
  NoLinks no_links;
  LocalCollectives collectives;
  std::optional<LocalCheckpointSink> sink;
  if (!config.checkpoint_dir.empty()) {
    sink.emplace(config.checkpoint_dir, config.checkpoint_keep,
                 writes_folder(resolve_checkpoint_form(config.checkpoint_form, CheckpointPremises{})));
  }
  RankRole role;
  role.spec = model::StageSpec::whole(inputs.model);
  return train(inputs, role, {*backend, no_links, collectives, sink ? &*sink : nullptr}, log);
}

}  // namespace geotrain::runtime
