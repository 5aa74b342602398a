#include "geotrain/plan/flush_advisor.hpp"

#include "geotrain/common/errors.hpp"

namespace geotrain::plan {

FlushRecommendation recommend_flush(const Network& network, const Plan& plan, SimulationConfig config,
                                    double tolerance) {
  if (!(tolerance >= 0) || tolerance >= 1) throw InputError("flush tolerance must be in [0, 1)");
  config.micro_batches_per_flush = 0;  // one flush: its size is the micro-batches per replica
  const int micro_batches = pipeline_work(config, plan.pipeline_stages, plan.data_parallel).micro_batches_per_flush;
  FlushRecommendation out;
  out.tolerance = tolerance;
  for (int m = 1; m <= micro_batches; ++m) {
    if (micro_batches % m != 0) continue;
    config.micro_batches_per_flush = m;
    const SimulationResult r = simulate(network, plan, config);
    out.candidates.push_back({m, r.iteration_s, r.utilisation_mean, r.utilisation_min});
    if (r.utilisation_mean > out.candidates[out.best].utilisation_mean) {
      out.best = static_cast<int>(out.candidates.size()) - 1;
    }
  }
  const double threshold = (1.0 - tolerance) * out.candidates[out.best].utilisation_mean;
  while (out.candidates[out.recommended].utilisation_mean < threshold) ++out.recommended;
  return out;
}

}  // namespace geotrain::plan
