// The training loop of one rank (runtime/trainer.hpp's train()), internal to
// the runtime library. One class, its concerns in files of their own:
// trainer.cpp (the loop, the step, the switch to local steps),
// trainer_checkpoints.cpp (checkpoints written and restored, error-feedback
// state), trainer_flushless.cpp (the unbroken 1F1B stream),
// trainer_summary.cpp (parameters, memory, the end-of-run summary).
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "geotrain/io/tokenizer.hpp"
#include "geotrain/model/optimizer.hpp"
#include "geotrain/runtime/evaluation.hpp"
#include "geotrain/runtime/gradient_buckets.hpp"
#include "geotrain/runtime/local_steps.hpp"
#include "geotrain/runtime/progress_log.hpp"
#include "geotrain/runtime/sampler.hpp"
#include "geotrain/runtime/trainer.hpp"
#include "geotrain/runtime/weight_versions.hpp"

namespace geotrain::runtime {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
inline double seconds_since(Clock::time_point start) { return seconds_between(start, Clock::now()); }

// Names of the local-steps state among a rank's per-rank checkpoint tensors.
inline constexpr std::string_view kLocalState = "local_steps.";

// Activation sets a stage keeps: its schedule's, or the flushless stream's.
int activation_slots(const io::Config& c, int micro_batches_per_flush, int stages);

// The training loop of one rank, step by step: the stage it holds, its
// optimizer and pipeline program, and what it has measured so far.
class RankTrainer {
 public:
  RankTrainer(RunInputs& inputs, const RankRole& role, const RankConnections& with, std::ostream& log);

  TrainResult run();

 private:
  bool local_steps() const { return config_.outer.local_steps > 0; }
  // The replicas whose gradients are summed every step, and over which
  // collectives: all of them until local steps start (outer.synchronous_steps).
  int per_step_replicas() const {
    return !outer_ ? role_.replicas : with_.within_site ? role_.site_replicas : 1;
  }
  Collectives& per_step_sums() const { return outer_ && with_.within_site ? *with_.within_site : with_.collectives; }

  // Local steps have started (or start with this run's first step): true
  // from the outer step's construction; before it, what the step resumed at says.
  bool local_phase() const {
    return outer_.has_value() || (local_steps() && result_.first_step >= config_.outer.synchronous_steps);
  }

  // The outer step's anchor is the parameters as local steps start.
  void start_outer_optimizer();

  // The per-step sum (all replicas; with local steps, a site's) overlaps the
  // last backward. With sites it runs on the site's own communicator, so its
  // buckets never meet the outer exchange's fragments.
  void arrange_per_step_sums();

  // After the inner step that completed `completed_steps`: the outer step's
  // turn, or, at the end of the synchronous start, local steps begin.
  void after_inner_step(int completed_steps);

  // A sum over every rank of the job: the replica's stages, the replicas,
  // then the tensor-parallel unit.
  double sum_over_job(double value);

  LocalStepsSettings local_steps_settings();

  // FNV-1a of `count` parameters from `offset` (the whole stage by default; ranks of one stage must agree
  // bit for bit, and so must a pipeline's two copies of a tied embedding).
  std::uint64_t parameter_fingerprint(std::size_t offset = 0, std::size_t count = 0);

  // Parameters are drawn before the optimizer sees the stage.
  static model::Stage& initialized(model::Stage& stage, std::uint64_t seed) {
    stage.initialize(seed);
    return stage;
  }

  void resume_from(const io::Checkpoint& checkpoint, const std::string& path);

  // The tied embedding's gradient is summed between a pipeline's two ends (on every rank: the same answer).
  bool splits_tied_embedding() const { return role_.stages > 1 && model_.tied_head; }
  bool tied_embedding_encoded() const {
    return splits_tied_embedding() && config_.compression.tied_embedding != WireFormat::fp32;
  }

  // What the error-feedback residuals depend on besides the pipeline cut
  // (which their names carry): the same string, the same meaning.
  std::string residual_layout() const;

  std::string residual_prefix() const;

  // This rank's residuals from the checkpoint when it was written for the
  // same wire format, replicas and pipeline cut; otherwise they start at zero.
  void restore_residuals(const io::Checkpoint& checkpoint, const std::string& path);

  // Local steps: this replica's own parameters and inner moments (replicas
  // differ between synchronisations) and the outer optimizer's state, from
  // a checkpoint of the same layout and settings; otherwise the outer step
  // restarts from the checkpoint's parameters with zero momentum.
  void restore_local_state(const io::Checkpoint& checkpoint, const std::string& path);

  // Weights only: the optimizer's moments stay zero, the step and the data
  // sampler at their start. The file's copy is freed once on the device.
  void start_from(RunInputs& inputs);

  // The tied embedding lives on the first and the last stage: counted once.
  void count_parameters();

  // The reporting rank's device memory for its stage, optimizer and pipeline
  // buffers, from the planner's memory model (tests/model/test_memory_model.cpp
  // holds it equal to what they allocate without tensor parallelism).
  void report_memory();

  void start_timeline();

  double validation() {
    return validation_loss(pipeline_, with_.links, with_.collectives, data_, B_, T_, layout_.eval_batches,
                           role_.replicas);
  }

  void train_step(int step);

  // pipeline.flushless: both weight versions, the gradient sums left in
  // flight, and a second set of batches (a slice runs the next step's first
  // forwards).
  void start_flushless();

  void draw_batches(int step);

  // Whatever else uses the pipeline after this step (validation, sampling,
  // the end) needs it empty: the stream drains there and starts afresh.
  bool stream_stops_after(int step) const;

  // pipeline.flushless: step `step`'s slice of the unbroken 1F1B stream.
  // Its gradient sums leave at its end; its update runs in the next slice,
  // right before the first forward that reads it (the step after next), or
  // at once when the stream drains here.
  void train_slice(int step);

  void apply_update();


  // The optimizer step and what follows it (the outer step's turn), timed.
  struct Update {
    double learning_rate = 0;
    Clock::time_point optimizer_start;
    double optimizer_s = 0, outer_s = 0;
  };
  Update apply_optimizer(int step, double norm);
  // The step's mean loss; a loss that is no longer finite stops the run.
  double checked_loss(int step, double job_loss, int summed_replicas) const;

  void record_step(int step, double loss, double lr, double norm, double step_s, double sync_s, double optimizer_s, const StageTimes& times);

  void validate_at(int step, bool last);

  // Every stage of every replica generates (identical replicas sample
  // identically); the reporting rank prints.
  void sample_at(int step);

  // Returns whether the job was asked to stop (SIGTERM): checkpointed, then out.
  bool checkpoint_at(int step, bool last);

  // Waits for the checkpoint in flight, if any (collective), and reports it.
  void publish_checkpoint() {
    if (checkpoint_in_flight_ > 0) report_checkpoint(with_.checkpoints->finish());
  }

  void report_checkpoint(const std::string& path);

  void save(int completed_steps);

  void add_local_state(io::Checkpoint& metadata);

  // The job's means, every rank's compute utilisation and a fingerprint of
  // every rank's parameters, in one exchange: each rank adds its figures,
  // and its own values at its own index.
  void summarize();

  const io::Config& config_;
  const ModelShape& model_;
  const RankRole& role_;
  const RankConnections& with_;
  ProgressLog progress_;
  io::TokenDataset& data_;
  const StepLayout& layout_;  // what runs (the config as written may leave it to the layout search)
  const int B_, T_, m_;
  const int flushes_;  // pipeline flushes per step (layout.micro_batches_per_flush)
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

}  // namespace geotrain::runtime
