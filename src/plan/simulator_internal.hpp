// Shared by simulator.cpp (one iteration's pipeline and synchronous data
// parallelism), outer_sync.cpp (local steps) and site_traffic.cpp.
#pragma once
#include <vector>

#include "geotrain/plan/simulator.hpp"

namespace geotrain::plan::simulation {

// The tied embedding's gradient between each replica's first and last
// stage: the slowest replica's transfer each way (first -> last, last -> first).
struct TiedTransfer {
  double down_s = 0, up_s = 0;
};
TiedTransfer tied_transfer_s(const Network& network, const Plan& plan, const PipelineWork& work);

// When stage s's sum of `total` bytes over `group` ends, its last backward
// ending at `finish` (with buckets, overlapping that backward).
double datap_end_s(const Network& network, const std::vector<int>& group, double total, const PipelineWork& work,
                   int s, double finish);

// Local steps: from the pipeline phase (and each stage's last backward),
// the step time averaged over H steps with each stage group's outer sync.
void add_outer_sync(const Network& network, const Plan& plan, const PipelineWork& work, SimulationResult* result);

// Bytes between devices of different sites per step (SimulationResult::cross_site_*).
void add_cross_site_traffic(const Network& network, const Plan& plan, const PipelineWork& work,
                            SimulationResult* result);

}  // namespace geotrain::plan::simulation
