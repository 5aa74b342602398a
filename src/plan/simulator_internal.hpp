// Shared by simulator.cpp (one iteration), simulator_replicas.cpp (its
// pipeline phase), simulator_exchanges.cpp (synchronous data parallelism
// and the tied embedding), outer_sync.cpp (local steps) and site_traffic.cpp.
#pragma once
#include <vector>

#include "geotrain/plan/simulator.hpp"

namespace geotrain::plan::simulation {

// The replicas' pipeline phase under `programs`: each stage's last backward,
// compute and sending (the slowest replica's), and every device's compute.
struct PipelinePhase {
  std::vector<double> last_backward_s, compute_s, sending_s;
  double total_compute = 0;
  std::vector<double> device_compute;  // one per (replica, stage)
};
// Each stage of each replica runs programs[stage]; `trace` (may be null)
// receives every step.
PipelinePhase play_replicas(const Network& network, const Plan& plan, const PipelineWork& work,
                            const std::vector<std::vector<Step>>& programs, std::vector<TraceEvent>* trace);
// One steady step of a flushless pipeline (per step of a longer stream).
PipelinePhase flushless_step(const Network& network, const Plan& plan, const PipelineWork& work,
                             std::vector<TraceEvent>* trace);

// The tied embedding's gradient between each replica's first and last
// stage: the slowest replica's transfer each way (first -> last, last -> first).
struct TiedTransfer {
  double down_s = 0, up_s = 0;
};
TiedTransfer tied_transfer_s(const Network& network, const Plan& plan, const PipelineWork& work);

// Stage s's sum in gradient buckets (runtime/gradient_buckets.hpp): the
// layers' gradient fills evenly over the group's slowest last backward,
// which ends at `finish`; `ready` holds when each full bucket may start,
// `sent` their bytes; the rest (total - sent) goes at `finish`.
struct BucketSchedule {
  std::vector<double> ready;
  double sent = 0;
};
// The scheme stage s's group sums by: PipelineWork::stage_dp_scheme, which
// simulate() fills under auto (each group's choice, made once), else dp_scheme.
inline DataParallelScheme stage_scheme(const PipelineWork& w, int s) {
  return static_cast<int>(w.stage_dp_scheme.size()) > s ? w.stage_dp_scheme[static_cast<std::size_t>(s)] : w.dp_scheme;
}
inline bool sums_in_buckets(const PipelineWork& w, int s) {
  return w.bucket_bytes > 0 && static_cast<int>(w.layer_gradient_bytes.size()) > s;
}
BucketSchedule bucket_schedule(const std::vector<int>& group, double total, const PipelineWork& work, int s,
                               double finish);

// When stage s's sum of `total` bytes over `group` ends, its last backward
// ending at `finish` (with buckets, overlapping that backward).
double datap_end_s(const Network& network, const std::vector<int>& group, double total, const PipelineWork& work,
                   int s, double finish);

// With shared links: when each stage's sum ends (its last backward ending
// at finish[s]), every group's sums and buckets played together.
std::vector<double> shared_datap_ends(const Network& network, const Plan& plan, const PipelineWork& work,
                                      const std::vector<double>& finish);

// Local steps: from the pipeline phase (and each stage's last backward),
// the step time averaged over H steps with each stage group's outer sync.
void add_outer_sync(const Network& network, const Plan& plan, const PipelineWork& work, SimulationResult* result);

// Bytes between devices of different sites per step (SimulationResult::cross_site_*).
void add_cross_site_traffic(const Network& network, const Plan& plan, const PipelineWork& work,
                            SimulationResult* result);

}  // namespace geotrain::plan::simulation
