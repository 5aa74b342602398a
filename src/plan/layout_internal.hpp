// Shared by layout_split.cpp (one placement: micro-batch, flush, layer
// split) and layout_search.cpp (degrees, devices, placements).
#pragma once
#include <limits>
#include <vector>

#include "geotrain/plan/layout_search.hpp"

namespace geotrain::plan::layout {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Context {
  const Network& net;
  SimulationConfig base;       // device_tflops filled from the network's types
  const LayoutOptions& options;
  std::vector<double> memory;  // per device, bytes; +inf where unknown
};

Context make_context(const Network& net, const SimulationConfig& base, const LayoutOptions& options);

// The best flush and layer split of one placement at micro-batch size b.
struct Split {
  bool fits = false;
  int micro_batch = 1;
  int flush = 0;           // micro-batches per flush
  std::vector<int> layers;
  double iteration_s = kInf;
};

// refine: hill-climb the split by simulation (else the balanced split only,
// for screening). options.even_split: the even split, if it fits.
// flush > 0: only that flush size (else every one the schedule allows).
Split best_split(const Context& ctx, const Plan& plan, int micro_batch, bool refine, int flush = 0);

// Micro-batch sizes to try for dp replicas (each divides B / dp).
std::vector<int> micro_batch_choices(const Context& ctx, int data_parallel);

// The Layout of a placement and its split: memory per stage, idle devices, simulation.
Layout describe(const Context& ctx, const Plan& plan, const Split& split);

// The stage order refined by simulation (balanced split, micro-batch b,
// that flush): the `keep` best plans, neighbours rematched (layout_order.cpp).
std::vector<Plan> stage_orders(const Context& ctx, const Plan& plan, int micro_batch, int flush, int keep);

// The memory a stage of the split needs on each of its devices.
std::vector<double> stage_memory_bytes(const Context& ctx, const Plan& plan, const Split& split);

}  // namespace geotrain::plan::layout
