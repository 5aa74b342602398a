// How many micro-batches per pipeline flush hide fill and drain on a given
// network: every flush size that divides a replica's micro-batches is
// simulated, and the smallest whose compute utilisation comes within a
// tolerance of the best is recommended (smaller flushes keep fewer
// micro-batches' activations alive under GPipe). Pure C++, deterministic.
#pragma once
#include <vector>

#include "geotrain/plan/simulator.hpp"

namespace geotrain::plan {

// "Within a few percent of the best": utilisation >= (1 - tolerance) * best.
constexpr double kFlushTolerance = 0.02;

struct FlushCandidate {
  int micro_batches_per_flush = 0;
  double iteration_s = 0;
  double utilisation_mean = 0, utilisation_min = 0;  // as SimulationResult
};

struct FlushRecommendation {
  std::vector<FlushCandidate> candidates;  // every divisor of the micro-batches per replica, ascending
  int best = 0;         // index of the highest mean utilisation (the first of equals)
  int recommended = 0;  // index of the smallest flush within the tolerance of the best
  double tolerance = kFlushTolerance;
  const FlushCandidate& choice() const { return candidates[recommended]; }
};

// Simulates `config` with every flush size m dividing the micro-batches per
// replica M = global batch / (D_dp x micro-batch); config.micro_batches_per_flush
// is ignored. Throws InputError as pipeline_work does.
FlushRecommendation recommend_flush(const Network& network, const Plan& plan, SimulationConfig config,
                                    double tolerance = kFlushTolerance);

}  // namespace geotrain::plan
