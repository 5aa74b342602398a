// Timing files: one HDF5 file per run, written by rank 0 at the end (rank
// 0 gathers every rank's events). What happened, when, on which rank, next
// to what the planner and the simulator predicted.
//
// Layout (format version 1; `h5dump -H FILE` shows it; docs/analysis.md, "Timing files"):
//   attributes of /      format ("geotrain-timing"), format_version, writer, time_unit ("s"),
//                        config (the run's "section.key = value" lines), model_name, device,
//                        ranks, pipeline_stages, data_parallel, micro_batches, micro_batch_sequences,
//                        sequence_length, schedule, placement, first_step, tokens_per_step,
//                        model_flops_per_token, device_peak_flops_per_s (0: unknown), clock
//   /events/{rank, step, micro_batch, kind, start, end, bytes, peer}
//                        one row per event; kind is an HDF5 enum (forward, backward, send, recv,
//                        idle, allreduce, optimizer, data, evaluate, checkpoint); start/end in s
//                        from a common epoch (a barrier before the first step); micro_batch and
//                        peer are -1 where they do not apply
//   /steps/{step, loss, learning_rate, grad_norm}   per step (loss: the global mean)
//   /steps/wall_time     [ranks, steps]: each rank's time of each step, s
//   /validation/{step, loss}   each validation of the run (step = steps trained before it)
//   /network/{latency [N, N] s, bandwidth [N, N] bytes/s, site [N]}; attribute source
//   /plan/{stage_of_rank [N], replica_of_rank [N], devices [stages, replicas]}; attributes
//                        text, predicted_datap_s, predicted_pipeline_s (the cost model's
//                        communication), predicted_iteration_s, predicted_bubble_fraction (the
//                        simulator on the matrix, compute calibrated per stage from the measured
//                        median forward / backward: /plan/forward_s, /plan/backward_s)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace geotrain::io {

inline constexpr int kTimingFormatVersion = 1;

enum class EventKind : std::int8_t { forward, backward, send, recv, idle, allreduce, optimizer, data, evaluate, checkpoint };
inline constexpr int kEventKinds = 10;
const char* to_string(EventKind kind);

struct TimingEvent {
  std::int32_t rank = 0, step = 0, micro_batch = -1;
  EventKind kind = EventKind::forward;
  double start_s = 0, end_s = 0;
  std::int64_t bytes = 0;
  std::int32_t peer = -1;
};

struct TimingRun {
  std::string config_text, layout_text, model_name, device, schedule, placement, plan_text, network_source;
  int ranks = 1, pipeline_stages = 1, data_parallel = 1, micro_batches = 1, micro_batch_sequences = 1;
  int sequence_length = 1, first_step = 0;
  double tokens_per_step = 0, model_flops_per_token = 0, device_peak_flops_per_s = 0;
  // The network the plan was made on (ranks x ranks, row-major).
  std::vector<double> latency_s, bandwidth_bytes_per_s;
  std::vector<std::string> site_of_rank;
  // The plan: devices[s * data_parallel + r] is the rank of stage s, replica r.
  std::vector<std::int32_t> stage_of_rank, replica_of_rank, devices;
  double predicted_datap_s = 0, predicted_pipeline_s = 0, predicted_iteration_s = 0, predicted_bubble_fraction = 0;
  std::vector<double> forward_s, backward_s;  // per stage: the simulator's compute input
  // Per step.
  std::vector<std::int32_t> step;
  std::vector<double> loss, learning_rate, grad_norm;
  std::vector<double> wall_time_s;  // ranks x steps, row-major
  std::vector<std::int32_t> validation_step;
  std::vector<double> validation_loss;
  std::vector<TimingEvent> events;
};

// Writes `path` atomically (a temporary name, fsync, rename); creates its
// folder. Throws RunError naming the path.
void write_timing_file(const std::string& path, const TimingRun& run);

// "{job}" in `pattern` becomes the Slurm job id (SLURM_JOB_ID) or, outside
// Slurm, the local start time and process id ("20261203-081500-4242"),
// the same for every call in one process.
std::string expand_run_name(const std::string& pattern);

// Events to bytes and back (for gathering them to the writing rank). Throws
// std::invalid_argument on malformed bytes.
std::vector<std::uint8_t> serialize_events(const std::vector<TimingEvent>& events);
std::vector<TimingEvent> deserialize_events(const std::vector<std::uint8_t>& bytes);

}  // namespace geotrain::io
