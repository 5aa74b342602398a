#include "geotrain/plan/placement.hpp"

#include <algorithm>
#include <iomanip>
#include <numeric>
#include <random>
#include <sstream>


namespace geotrain::plan {

Assignment random_assignment(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Assignment a(n);
  std::iota(a.begin(), a.end(), 0);
  for (int i = n - 1; i > 0; --i) {
    // Unbiased draw in [0, i]: reject the top partial bucket.
    const std::uint64_t range = static_cast<std::uint64_t>(i) + 1;
    const std::uint64_t limit = std::mt19937_64::max() - std::mt19937_64::max() % range;
    std::uint64_t x;
    do x = rng(); while (x >= limit);
    std::swap(a[i], a[static_cast<int>(x % range)]);
  }
  return a;
}

PlacementResult make_placement(const CostModel& model, Placement placement, const SearchOptions& options) {
  const int k = model.groups(), d = model.group_size();
  PlacementResult out;
  switch (placement) {
    case Placement::planned: {
      const SearchResult found = search_plan(model, options);
      out.plan = found.plan;
      out.planner_seconds = found.seconds;
      break;
    }
    case Placement::rank_order:
      out.plan = literal_plan(model, megatron_rank_order(k, d));
      break;
    case Placement::dtfm_rank_order:
      out.plan = literal_plan(model, dtfm_rank_order(k, d));
      break;
    case Placement::random:
      out.plan = literal_plan(model, random_assignment(model.devices(), options.seed));
      break;
  }
  return out;
}

std::string describe_placement(const Plan& p, const std::string& placement, const Network& net) {
  std::ostringstream out;
  out << "plan (" << placement << "): " << (p.tensor_parallel > 1 ? std::to_string(p.tensor_parallel) + "-way tensor-parallel units x " : std::string())
      << p.pipeline_stages << " stages x " << p.data_parallel
      << " replicas; predicted communication per step " << std::setprecision(4) << p.cost.total_s() << " s (data-parallel "
      << p.cost.datap_s << " s, pipeline " << p.cost.pipeline_s << " s)\n";
  for (int r = 0; r < p.data_parallel; ++r) {
    out << "  pipeline " << r << ": ranks ";
    for (int s = 0; s < p.pipeline_stages; ++s) {
      const std::vector<int> unit = p.ranks_of_unit(p.stages[s][r]);
      out << (s ? " -> " : "") << (unit.size() > 1 ? "[" : "");
      for (std::size_t j = 0; j < unit.size(); ++j) out << (j ? " " : "") << unit[j];
      out << (unit.size() > 1 ? "]" : "");
      if (!net.site_of_device.empty() && unit.front() < net.device_count) {
        out << " (" << net.site_of_device[unit.front()] << ")";
      }
    }
    out << "\n";
  }
  std::vector<char> used(static_cast<std::size_t>(std::max(net.device_count, 0)), 0);
  for (const auto& stage : p.stages) {
    for (int unit : stage) {
      for (int d : p.ranks_of_unit(unit)) {
        if (d < net.device_count) used[static_cast<std::size_t>(d)] = 1;
      }
    }
  }
  std::string idle;  // the network is rank 0's (elsewhere it may be empty)
  for (int d = 0; d < net.device_count; ++d) {
    if (!used[static_cast<std::size_t>(d)]) idle.append(" ").append(std::to_string(d));
  }
  if (!idle.empty()) out << "  idle ranks:" << idle << "\n";
  return out.str();
}

}  // namespace geotrain::plan
