// Tensor parallelism in the planner (Megatron-style, inside a node): t
// devices of one node form a unit that the pipeline and data-parallel
// planner treats as one device. A unit computes at t x its slowest member's
// speed x a configured efficiency; the simulator adds each layer's
// all-reduces over the unit's ring (SimulationConfig::tensor_parallel); each
// member holds 1/t of the split weights and activations (MemorySettings::
// tensor_parallel); a unit's link to another unit is the slowest of its
// members' links to their counterparts (member i talks to member i).
// Method and assumptions: src/plan/README.md, "Tensor parallelism".
#pragma once
#include <vector>

#include "geotrain/common/model_shape.hpp"
#include "geotrain/plan/network.hpp"

namespace geotrain::plan {

struct TensorUnits {
  int tensor_parallel = 1;
  std::vector<std::vector<int>> groups;  // unit -> device ids of the original network, tensor-parallel rank order
  // One device per unit: links between counterparts (latency: the largest,
  // bandwidth: the smallest over members i -> i), member 0's site and node,
  // one device type per distinct (speed, memory) with the unit's speed and
  // one member's memory.
  Network network;
  std::vector<double> ring_latency_s;              // per unit: its ring's slowest hop, one way
  std::vector<double> ring_bandwidth_bytes_per_s;  // per unit: its ring's narrowest hop
};

// Each node's devices in id order (nodes by first device), cut into runs of
// t; a node's last devices that do not fill a run are in no group.
std::vector<std::vector<int>> node_tensor_groups(const Network& network, int tensor_parallel);

// The unit network of `groups` (each of the same size t, devices of one node
// each; InputError otherwise). A unit's speed: t x its slowest
// member's TFLOPS (untyped: untyped_tflops) x `efficiency` (1 for t = 1);
// its memory: its smallest member's (untyped: untyped_memory_bytes, 0 = unknown).
TensorUnits tensor_units(const Network& network, const std::vector<std::vector<int>>& groups, double untyped_tflops,
                         double untyped_memory_bytes, double efficiency);

// The links between units of `groups` (same sizes, ids in range;
// InputError otherwise): u -> v the slowest of the member links
// u[i] -> v[i] (latency the largest, bandwidth the smallest), with member
// 0's site and node; no device types. Shared links: a unit's NIC is its
// slowest member's, a site's uplink 1/t of the devices' (the t members send
// their shares at once). What the layout search plans units
// on, and what the runtime places a fixed layout's units and predicts its
// timing on.
Network counterpart_network(const Network& network, const std::vector<std::vector<int>>& groups);

// The tensor-parallel degrees worth trying: `wanted` (or {fixed}) that
// divide the model's heads and hidden size and leave at least one unit.
std::vector<int> tensor_parallel_choices(const Network& network, const ModelShape& model, const std::vector<int>& wanted);

}  // namespace geotrain::plan
