// The order of the stage groups along the pipeline. The cost model orders
// them by communication alone; with mixed devices the order also changes
// the fill and drain (a 1F1B pipeline warms up longest on its first
// stages), so the order is refined by simulation: every order of up to 5
// stages (120), swaps of two stages in longer ones.
#include <algorithm>
#include <numeric>

#include "geotrain/plan/bottleneck_matching.hpp"
#include "layout_internal.hpp"

namespace geotrain::plan::layout {
namespace {

// Groups in `order`, each next one matched to the previous by the
// bottleneck of its links' time for one micro-batch there and back.
Plan reordered(const Context& ctx, const Plan& plan, const std::vector<int>& order, double bytes) {
  Plan out = plan;
  const int d = plan.data_parallel;
  out.stages.clear();
  out.boundary_s.clear();
  out.stages.push_back(plan.stages[order[0]]);
  for (size_t s = 1; s < order.size(); ++s) {
    const std::vector<int>& previous = out.stages.back();
    const std::vector<int>& group = plan.stages[order[s]];
    std::vector<double> block(static_cast<size_t>(d) * d);
    for (int i = 0; i < d; ++i) {
      for (int j = 0; j < d; ++j) {
        block[i * d + j] = ctx.net.transfer_s(previous[i], group[j], bytes) + ctx.net.transfer_s(group[j], previous[i], bytes);
      }
    }
    const Matching m = bottleneck_matching(block.data(), d);
    std::vector<int> stage(d);
    for (int r = 0; r < d; ++r) stage[r] = group[m.partner[r]];
    out.stages.push_back(stage);
    out.boundary_s.push_back(m.bottleneck);
  }
  return out;
}

struct Scored {
  double iteration_s;
  std::vector<int> order;
};

}  // namespace

std::vector<Plan> stage_orders(const Context& ctx, const Plan& plan, int b, int flush, int keep) {
  const int p = plan.pipeline_stages;
  const double bytes = static_cast<double>(b) * ctx.base.model.sequence_length * ctx.base.model.hidden *
                       ctx.base.model.activation_bytes;
  auto score = [&](const std::vector<int>& order) {
    return Scored{best_split(ctx, reordered(ctx, plan, order, bytes), b, false, flush).iteration_s, order};
  };
  std::vector<int> identity(p);
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<Scored> seen{score(identity)};
  if (p <= 5) {
    std::vector<int> order = identity;
    while (std::next_permutation(order.begin(), order.end())) seen.push_back(score(order));
  } else {
    for (bool improved = true; improved;) {  // best swap of two stages, while one helps
      improved = false;
      Scored best = *std::min_element(seen.begin(), seen.end(),
                                      [](const Scored& a, const Scored& c) { return a.iteration_s < c.iteration_s; });
      for (int i = 0; i < p; ++i) {
        for (int j = i + 1; j < p; ++j) {
          std::vector<int> order = best.order;
          std::swap(order[i], order[j]);
          seen.push_back(score(order));
          improved |= seen.back().iteration_s < best.iteration_s * (1 - 1e-9);
        }
      }
    }
  }
  std::stable_sort(seen.begin(), seen.end(), [](const Scored& a, const Scored& c) { return a.iteration_s < c.iteration_s; });
  std::vector<Plan> plans;
  for (size_t k = 0; k < seen.size() && static_cast<int>(k) < keep; ++k) {
    if (k > 0 && seen[k].order == seen[k - 1].order) continue;
    plans.push_back(reordered(ctx, plan, seen[k].order, bytes));
  }
  return plans;
}

}  // namespace geotrain::plan::layout
