// Placements the simulator compares: the planner's, the default rank orders
// of Megatron-LM/DeepSpeed and of DT-FM's runtime, and a seeded random one.
#pragma once
#include <cstdint>
#include <string>

#include "geotrain/common/enum_names.hpp"
#include "geotrain/plan/plan.hpp"
#include "geotrain/plan/search.hpp"

namespace geotrain::plan {

enum class Placement {
  planned,          // search_plan: the hybrid genetic search under the cost model
  rank_order,       // Megatron-LM / DeepSpeed default: rank r in stage r / D_dp, scored literally
  dtfm_rank_order,  // DT-FM runtime default: rank r in stage r mod D_pp, scored literally
  random,           // a seeded uniformly random permutation, scored literally (no scheduler)
};

struct PlacementResult {
  Plan plan;
  double planner_seconds = 0;  // search time (planned only)
};

// `options` is used by `planned` only (its seed and candidates); `random`
// draws its permutation from `options.seed`.
PlacementResult make_placement(const CostModel& model, Placement placement, const SearchOptions& options);

// A uniformly random permutation of 0..n-1 from `seed`: Fisher-Yates with
// std::mt19937_64 and an explicit unbiased draw, so it is the same on every
// standard library.
Assignment random_assignment(int n, std::uint64_t seed);

// Names as the command line and reports spell them.
inline constexpr EnumName<Placement> kPlacementNames[] = {{Placement::planned, "planned"},
                                                          {Placement::rank_order, "rank-order"},
                                                          {Placement::dtfm_rank_order, "dtfm-rank-order"},
                                                          {Placement::random, "random"}};
inline std::string to_string(Placement placement) { return name_in(kPlacementNames, placement); }
inline bool parse_placement(const std::string& text, Placement* out) { return parse_name_in(kPlacementNames, text, out); }

// The plan as `train` prints it: its degrees, predicted communication, each
// pipeline's ranks (with their sites) and the idle ranks.
std::string describe_placement(const Plan& plan, const std::string& placement, const Network& network);

}  // namespace geotrain::plan
