// A complete tasklet allocation: stage order, devices per stage and which
// device feeds which, with its cost under the model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "geotrain/plan/cost_model.hpp"

namespace geotrain::plan {

struct Plan {
  int pipeline_stages = 0;
  int data_parallel = 0;
  // stages[s][r]: device of replica r at pipeline stage s. Chained matchings:
  // stages[s][r] sends activations to stages[s+1][r].
  std::vector<std::vector<int>> stages;
  // Tensor parallelism (Megatron-style, inside a node). tensor_parallel == 1:
  // tensor_groups is empty and stages[s][r] are device (= MPI rank) ids.
  // tensor_parallel = t > 1: stages[s][r] are unit ids u, and
  // tensor_groups[u] lists the t device ids (= MPI ranks) of unit u, all in
  // one node, in tensor-parallel rank order. Every device is in at most one
  // group; devices in no used unit are idle.
  int tensor_parallel = 1;
  std::vector<std::vector<int>> tensor_groups;
  std::vector<double> boundary_s;  // bottleneck link cost of each of the pp-1 boundaries
  CostBreakdown cost;
  // rank = replica * D_pp + stage (DT-FM convention, reference §8.1).
  int device_of_rank(int rank) const {
    return stages[rank % pipeline_stages][rank / pipeline_stages];
  }
  // The device ids of unit `unit`, in tensor-parallel rank order: {unit}
  // when tensor_parallel == 1, else tensor_groups[unit].
  std::vector<int> ranks_of_unit(int unit) const;
  std::uint64_t hash() const;  // FNV-1a over the layout (tp and groups too), for cross-rank checks
};

// Optimal ordering and matchings for the groups of `assignment` (the cost
// model depends on the partition alone, reference §1): exact bottleneck
// matchings, open path (Held-Karp up to `exact_path_limit` groups).
Plan complete_plan(const CostModel& model, const Assignment& assignment, int exact_path_limit = 16);

// Scores an assignment literally, as running it without a scheduler does
// (reference §3.3): group g is stage g, the m-th member of each group forms
// replica m, no matching or path optimisation.
Plan literal_plan(const CostModel& model, const Assignment& assignment);

// Default placements of Megatron-LM / DeepSpeed (rank r in stage r / D_dp)
// and of DT-FM's runtime (rank r in stage r mod D_pp), rank r = device r.
Assignment megatron_rank_order(int pipeline_stages, int data_parallel);
Assignment dtfm_rank_order(int pipeline_stages, int data_parallel);

// A lower bound on DATAP + PIPELINE over all partitions, from each device's
// cheapest possible group and neighbours (see cost_model.cpp for the proof).
double cost_lower_bound(const CostModel& model);

}  // namespace geotrain::plan
