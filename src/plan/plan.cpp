#include "geotrain/plan/plan.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "geotrain/plan/bottleneck_matching.hpp"
#include "geotrain/plan/open_path.hpp"

namespace geotrain::plan {

std::uint64_t Plan::hash() const {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::uint64_t x) {
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (x >> (8 * byte)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(static_cast<std::uint64_t>(pipeline_stages));
  mix(static_cast<std::uint64_t>(data_parallel));
  for (const auto& stage : stages) {
    for (int device : stage) mix(static_cast<std::uint64_t>(device));
  }
  // A plan without tensor parallelism hashes as before the field existed.
  if (tensor_parallel == 1 && tensor_groups.empty()) return h;
  mix(static_cast<std::uint64_t>(tensor_parallel));
  mix(static_cast<std::uint64_t>(tensor_groups.size()));
  for (const auto& group : tensor_groups) {
    mix(static_cast<std::uint64_t>(group.size()));
    for (int device : group) mix(static_cast<std::uint64_t>(device));
  }
  return h;
}

std::vector<int> Plan::ranks_of_unit(int unit) const {
  if (tensor_parallel <= 1) return {unit};
  if (unit < 0 || unit >= static_cast<int>(tensor_groups.size())) {
    throw std::out_of_range("Plan::ranks_of_unit: unit " + std::to_string(unit) + " of " +
                            std::to_string(tensor_groups.size()) + " tensor groups");
  }
  return tensor_groups[unit];
}

namespace {

std::vector<double> link_block(const CostModel& model, const int* a, const int* b, int size) {
  std::vector<double> block(static_cast<size_t>(size) * size);
  for (int i = 0; i < size; ++i) {
    for (int j = 0; j < size; ++j) block[i * size + j] = model.pipeline_link(a[i], b[j]);
  }
  return block;
}

}  // namespace

Plan complete_plan(const CostModel& model, const Assignment& assignment, int exact_path_limit) {
  const int k = model.groups(), d = model.group_size();
  Plan plan;
  plan.pipeline_stages = k;
  plan.data_parallel = d;
  plan.cost.datap_s = model.datap(assignment);

  // Group-to-group costs E(A, B) and the matchings that achieve them.
  std::vector<double> group_cost(static_cast<size_t>(k) * k, 0.0);
  std::vector<std::vector<int>> partner(static_cast<size_t>(k) * k);
  for (int a = 0; a < k; ++a) {
    for (int b = a + 1; b < k; ++b) {
      const auto block = link_block(model, &assignment[a * d], &assignment[b * d], d);
      Matching m = bottleneck_matching(block.data(), d);
      group_cost[a * k + b] = group_cost[b * k + a] = m.bottleneck;
      std::vector<int> inverse(d);
      for (int i = 0; i < d; ++i) inverse[m.partner[i]] = i;
      partner[a * k + b] = std::move(m.partner);
      partner[b * k + a] = std::move(inverse);
    }
  }
  const Path path = open_path(group_cost, k, exact_path_limit);
  plan.cost.pipeline_s = path.length;

  // Chain the matchings: replica r starts at the r-th member of the first group.
  std::vector<int> slot(d);
  std::iota(slot.begin(), slot.end(), 0);
  for (int s = 0; s < k; ++s) {
    const int g = path.order[s];
    if (s > 0) {
      const auto& p = partner[path.order[s - 1] * k + g];
      for (int r = 0; r < d; ++r) slot[r] = p[slot[r]];
      plan.boundary_s.push_back(group_cost[path.order[s - 1] * k + g]);
    }
    std::vector<int> stage(d);
    for (int r = 0; r < d; ++r) stage[r] = assignment[g * d + slot[r]];
    plan.stages.push_back(std::move(stage));
  }
  return plan;
}

Plan literal_plan(const CostModel& model, const Assignment& assignment) {
  const int k = model.groups(), d = model.group_size();
  Plan plan;
  plan.pipeline_stages = k;
  plan.data_parallel = d;
  plan.cost.datap_s = model.datap(assignment);
  for (int s = 0; s < k; ++s) {
    plan.stages.emplace_back(assignment.begin() + s * d, assignment.begin() + (s + 1) * d);
    if (s == 0) continue;
    double worst = 0;
    for (int r = 0; r < d; ++r) {
      worst = std::max(worst, model.pipeline_link(assignment[(s - 1) * d + r], assignment[s * d + r]));
    }
    plan.boundary_s.push_back(worst);
    plan.cost.pipeline_s += worst;
  }
  return plan;
}

Assignment megatron_rank_order(int pipeline_stages, int data_parallel) {
  // Consecutive ranks share a stage: rank r in stage r / D_dp, replica r % D_dp.
  Assignment a(static_cast<size_t>(pipeline_stages) * data_parallel);
  std::iota(a.begin(), a.end(), 0);
  return a;
}

Assignment dtfm_rank_order(int pipeline_stages, int data_parallel) {
  // Consecutive ranks form a pipeline: stage r % D_pp, replica r / D_pp.
  Assignment a;
  for (int s = 0; s < pipeline_stages; ++s) {
    for (int r = 0; r < data_parallel; ++r) a.push_back(r * pipeline_stages + s);
  }
  return a;
}

// DATAP >= max over devices u of (sum of u's D_dp - 1 cheapest datap pairs):
// every device sits in some group and DATAP takes the max over all of them.
// PIPELINE: every device is in a group that touches a boundary (pp >= 2), and
// a boundary is at least the cheapest link of each of its 2*D_dp devices
// (nearest[u]). Sort nearest descending; the k-th largest boundary value is
// >= nearest of some device outside the first k-1 boundaries, i.e. >= the
// (2*D_dp*(k-1) + 1)-th largest nearest. Summing over k gives the bound.
double cost_lower_bound(const CostModel& model) {
  const int n = model.devices(), d = model.group_size(), k = model.groups();
  double datap_bound = 0;
  std::vector<double> nearest(n, 0.0);
  std::vector<double> row;
  for (int u = 0; u < n; ++u) {
    row.clear();
    double cheapest_link = std::numeric_limits<double>::infinity();
    for (int v = 0; v < n; ++v) {
      if (v == u) continue;
      row.push_back(model.datap_pair(u, v));
      cheapest_link = std::min(cheapest_link, model.pipeline_link(u, v));
    }
    std::partial_sort(row.begin(), row.begin() + (d - 1), row.end());
    datap_bound = std::max(datap_bound, std::accumulate(row.begin(), row.begin() + (d - 1), 0.0));
    nearest[u] = n > 1 ? cheapest_link : 0.0;
  }
  std::sort(nearest.begin(), nearest.end(), std::greater<>());
  double pipeline_bound = 0;
  for (int b = 0; b < k - 1; ++b) pipeline_bound += nearest[std::min(n - 1, 2 * d * b)];
  return datap_bound + pipeline_bound;
}

}  // namespace geotrain::plan
