#include "geotrain/plan/placement.hpp"

#include <numeric>
#include <random>

#include "geotrain/common/enum_names.hpp"

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

namespace {
constexpr EnumName<Placement> kPlacementNames[] = {{Placement::planned, "planned"},
                                                   {Placement::rank_order, "rank-order"},
                                                   {Placement::dtfm_rank_order, "dtfm-rank-order"},
                                                   {Placement::random, "random"}};
}  // namespace

std::string to_string(Placement placement) { return name_in(kPlacementNames, placement); }

bool parse_placement(const std::string& text, Placement* out) { return parse_name_in(kPlacementNames, text, out); }

}  // namespace geotrain::plan
