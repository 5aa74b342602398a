// The layout search (DESIGN §5): chooses pp, dp, the micro-batch size and
// count, the layers of each stage (uneven: a slow device gets fewer), which
// devices are used (pp x dp <= N; the rest stay idle) and the placement,
// every choice within device memory. Its objective is the simulator's
// iteration time; the paper's cost model still places devices (the DT-FM
// search runs for each candidate pp x dp) and stays one evaluator among
// others. Pure and deterministic given the placement search's seed.
// Method and limits: src/plan/README.md, "Layout search".
#pragma once
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "geotrain/plan/memory_model.hpp"
#include "geotrain/plan/network.hpp"
#include "geotrain/plan/plan.hpp"
#include "geotrain/plan/search.hpp"
#include "geotrain/plan/simulator.hpp"
#include "geotrain/plan/tensor_parallel.hpp"

namespace geotrain::plan {

// No layout fits in memory, or the fixed choices cannot be met; the message
// says what was needed and what there is.
class LayoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LayoutOptions {
  std::optional<int> pipeline_stages;         // fixed by the user; else searched
  std::optional<int> data_parallel;
  std::optional<int> micro_batch_sequences;   // fixed; else the best of micro_batch_choices
  std::vector<int> micro_batch_choices = {1, 2, 4, 8};
  std::optional<int> micro_batches_per_flush; // GPipe flush, fixed; else the best that fits (1F1B: one flush)
  MemorySettings memory;
  double untyped_memory_bytes = 0;            // memory of a device without a type; 0: unlimited
  SearchOptions placement;                    // the DT-FM placement search run per finalist
  int finalists = 4;                          // (pp, dp) pairs that get the full placement search
  // The placement search is skipped (structured placements only) beyond
  // this many devices per candidate: its time grows with dp (docs/planning.md).
  int placement_search_max_devices = 256;
  bool even_split = false;                    // keep the even layer split (for comparisons)
  // Tensor parallelism (tensor_parallel.hpp): fixed degree, else each of
  // tensor_parallel_choices that divides the heads and fits a node is
  // searched and the fastest kept. tensor_efficiency: a configured factor on
  // a unit's speed for t > 1 (measured kernels' loss from splitting), on top
  // of the all-reduces the simulator prices explicitly; 1: none.
  std::optional<int> tensor_parallel;
  std::vector<int> tensor_parallel_choices = {1, 2, 4, 8};
  double tensor_efficiency = 1.0;
};

// One (pp, dp, micro-batch) the search looked at, with its screening time.
struct LayoutCandidate {
  int pipeline_stages = 0, data_parallel = 0, micro_batch_sequences = 0;
  double iteration_s = 0;  // structured placement, proportional split; +inf: does not fit
  bool finalist = false;
};

struct Layout {
  Plan plan;                          // device ids of the whole network; idle devices absent
  std::vector<int> layers_per_stage;  // pipeline order
  int micro_batch_sequences = 1;
  int micro_batches = 0;              // per replica per iteration
  int micro_batches_per_flush = 0;
  std::vector<int> idle_devices;
  std::vector<double> memory_bytes_per_stage;    // what a device of the stage needs
  std::vector<double> capacity_bytes_per_stage;  // the smallest memory in the stage's group (+inf: unknown)
  std::string placement_source;       // which placement won: "dtfm-search", "typed-search", ...
  SimulationConfig config;            // as simulated (layers, micro-batch, flush, device speeds)
  SimulationResult simulation;
  std::vector<LayoutCandidate> candidates;
  double seconds = 0;                 // planner time
  // t > 1: plan.stages hold unit ids, plan.tensor_groups every unit formed
  // (used or not); config, simulation and the per-stage vectors are over the
  // unit network `units.network` (device_tflops and the tensor links per
  // unit). idle_devices: devices of the original network in no used unit.
  TensorUnits units;
  // Each degree searched and its best iteration (+inf: nothing fits).
  std::vector<std::pair<int, double>> tensor_parallel_tried;
  bool fits() const {
    for (size_t s = 0; s < memory_bytes_per_stage.size(); ++s) {
      if (memory_bytes_per_stage[s] > capacity_bytes_per_stage[s]) return false;
    }
    return true;
  }
};

// What the layout search runs for tensor-parallel degree t: the unit network
// (t = 1: the devices themselves, groups empty), the simulation config with
// the tensor fields set per unit, the options with the memory of one rank.
struct TensorProblem {
  TensorUnits units;
  SimulationConfig config;
  LayoutOptions options;
};
TensorProblem tensor_problem(const Network& network, const SimulationConfig& base, const LayoutOptions& options,
                             int tensor_parallel);
// A layout found on the unit network of `problem`, its plan given the
// tensor degree and groups and its idle devices those of `network`.
Layout layout_on_devices(Layout layout, const Network& network, const TensorProblem& problem);

// Searches the layout for `base` (model, global batch, schedule, DP scheme,
// overlap, recomputation, efficiency; peak_tflops is the speed of untyped
// devices) on `network`. Throws LayoutError when nothing fits.
Layout search_layout(const Network& network, const SimulationConfig& base, const LayoutOptions& options);

// A given placement with the micro-batch, flush and layer split chosen as
// the search chooses them (options.even_split: the even split), simulated.
// Throws LayoutError when it does not fit.
// A placement exactly as given (its stage order and matchings; the
// config's layers or the even split, its micro-batch and flush),
// simulated, with its memory per stage: no search and no memory check
// (Layout::fits says). Throws InputError where shapes do not fit.
Layout evaluate_layout(const Network& network, const SimulationConfig& config, const Plan& plan,
                       const LayoutOptions& options);

Layout complete_layout(const Network& network, const SimulationConfig& base, const Plan& plan,
                       const LayoutOptions& options);

}  // namespace geotrain::plan
