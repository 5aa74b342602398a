#include "geotrain/plan/placement.hpp"

#include <numeric>
#include <random>

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

std::string to_string(Placement placement) {
  switch (placement) {
    case Placement::planned: return "planned";
    case Placement::rank_order: return "rank-order";
    case Placement::dtfm_rank_order: return "dtfm-rank-order";
    case Placement::random: return "random";
  }
  return "?";
}

bool parse_placement(const std::string& text, Placement* out) {
  if (text == "planned") *out = Placement::planned;
  else if (text == "rank-order") *out = Placement::rank_order;
  else if (text == "dtfm-rank-order") *out = Placement::dtfm_rank_order;
  else if (text == "random") *out = Placement::random;
  else return false;
  return true;
}

}  // namespace geotrain::plan
