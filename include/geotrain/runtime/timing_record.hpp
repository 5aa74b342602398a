// Assembles the run's timing file (io/timing_file.hpp) on the writing rank:
// every rank's events and step times, the network and plan the job ran on,
// and the simulator's prediction for that plan with compute calibrated from
// the measured events.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "geotrain/io/config.hpp"
#include "geotrain/io/timing_file.hpp"
#include "geotrain/common/model_shape.hpp"
#include "geotrain/plan/network.hpp"
#include "geotrain/plan/plan.hpp"
#include "geotrain/plan/simulator.hpp"
#include "geotrain/runtime/trainer.hpp"

namespace geotrain::runtime {

// One rank's share (gathered to the writer under MPI).
struct RankTiming {
  std::vector<io::TimingEvent> events;
  std::vector<double> step_seconds;
  std::int64_t stage_parameters = 0;
};

struct JobDescription {
  StepLayout layout;            // what ran (the config may leave it to the layout search)
  std::string device;           // the backend's description
  plan::Network network;        // ranks x ranks
  std::string network_source;   // "probed", a scenario file, or "single rank"
  plan::Plan plan;              // stages[s][r] = rank
  std::string plan_text;
  std::vector<plan::DataParallelScheme> dp_schemes;  // per stage, the exchange MpiCollectives ran (empty: direct)
};

// A one-rank job: one stage, one replica, a 1 x 1 network.
JobDescription single_rank_job(const std::string& device, const StepLayout& layout);

// `reporting` is the reporting rank's result (losses, learning rates);
// `ranks[r]` is rank r's timing.
io::TimingRun make_timing_run(const io::Config& config, const ModelShape& model, const JobDescription& job,
                              const TrainResult& reporting, const std::vector<RankTiming>& ranks);

// Median over the recorded steps of each stage's forward, backward (per
// micro-batch) and optimizer time, from the events; 0 where none.
struct MeasuredCompute {
  std::vector<double> forward_s, backward_s;  // per stage
  double optimizer_s = 0;
};
MeasuredCompute measured_compute(const std::vector<io::TimingEvent>& events, const std::vector<std::int32_t>& stage_of_rank,
                                 int stages);

}  // namespace geotrain::runtime
