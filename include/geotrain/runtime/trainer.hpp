// The training loop of one rank: its pipeline stage of the model, its
// replica's slice of every global batch, the pipeline step (GPipe or 1F1B),
// gradient synchronisation, AdamW, periodic validation and a progress line
// per step on the reporting rank. The same loop runs alone (one stage, one
// replica) and under MPI (trainer links and collectives from mpi_training.hpp).
#pragma once
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "geotrain/io/config.hpp"
#include "geotrain/io/timing_file.hpp"
#include "geotrain/io/token_shard.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"
#include "geotrain/runtime/checkpointing.hpp"
#include "geotrain/runtime/gradient_sync.hpp"
#include "geotrain/runtime/pipeline.hpp"
#include "geotrain/runtime/rank_role.hpp"
#include "geotrain/runtime/run_inputs.hpp"

namespace geotrain::runtime {

// Where one step's time went on the average rank (seconds per step, the
// first step excluded; means over all ranks).
struct StepBreakdown {
  double step_s = 0;
  double compute_s = 0;        // forward + backward
  double pipeline_s = 0;       // waiting for / sending activations and gradients (the bubble included)
  double data_parallel_s = 0;  // gradient sync: data-parallel all-reduce, tied embedding, global norm
  double optimizer_s = 0;
};

struct TrainResult {
  std::vector<double> step_loss;      // mean training loss of each step (whole global batch)
  std::vector<double> step_learning_rate, step_grad_norm;
  std::vector<double> step_seconds;   // this rank's time of each step
  std::vector<std::int32_t> validation_step;  // steps trained before each validation (the first: before training)
  std::vector<double> validation_loss;
  double initial_validation_loss = 0;
  double final_validation_loss = 0;
  double tokens_per_second = 0;       // global tokens, over all steps after the first
  double model_flops_per_token = 0;
  double tokens_per_step = 0;         // global: every replica's micro-batches
  StepBreakdown breakdown;
  std::vector<double> compute_utilisation;  // per rank of the job: forward + backward time / step time
  bool replicas_identical = true;           // every stage's replicas ended with the same parameter bits
  int first_step = 0;                 // steps already done by the checkpoint resumed from
  bool stopped_by_signal = false;     // SIGTERM or SIGINT: checkpointed and stopped before the last step
  std::string stop_signal_name = "SIGTERM";  // as this rank saw it (another rank's signal: SIGTERM)
  std::string last_checkpoint;        // path of the last checkpoint written ("" if none)
  std::vector<io::TimingEvent> events;  // this rank's, when timing.file is set
  std::int64_t stage_parameters = 0;    // this rank's (its stage's)
  std::string device;                   // the backend's description
};


// FLOPs of one token's forward + backward: 6 per parameter plus attention's
// 12 * layers * hidden * sequence (the usual estimate; no recomputation).
double flops_per_token(const ModelShape& config, double parameters);

// Trains this rank's stage. Every rank of a job calls it with the same
// config; the global batch of a step is replicas * gradient_accumulation
// micro-batches of micro_batch_sequences sequences. Throws RunError when the
// loss stops being finite (on every rank: the loss is global).
TrainResult train(RunInputs& inputs, const RankRole& role, const RankConnections& with, std::ostream& log);

// The progress line's ETA: `elapsed_s` since this run began at
// `first_step` (a resumed run's checkpoint), after 0-based `step`.
double remaining_seconds(double elapsed_s, int first_step, int step, int train_steps);

// "final validation loss 2.411160 (before training 5.519800), 18365 tokens/s\n"
std::string final_summary(const TrainResult& result);

// "geotrain: stopped by SIGTERM after step 37; checkpoint ...; run again with --checkpoint.resume=auto to continue\n"
std::string stopped_summary(const TrainResult& result);

// One rank, the whole model; checkpoints in checkpoint.dir if set.
TrainResult train_single_rank(RunInputs& inputs, std::ostream& log);

}  // namespace geotrain::runtime
