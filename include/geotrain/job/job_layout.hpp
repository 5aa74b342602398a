// pipeline.layout = auto under mpirun: every rank measures its device, rank
// 0 runs the layout search (plan/layout_search.hpp) on the job's network and
// those speeds, and every rank receives the layout it trains with.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "geotrain/common/model_shape.hpp"
#include "geotrain/io/config.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"
#include "geotrain/plan/network.hpp"
#include "geotrain/plan/plan.hpp"
#include "geotrain/plan/simulator.hpp"
#include "geotrain/runtime/device_probe.hpp"

namespace geotrain::runtime {

struct JobLayout {
  plan::Plan plan;                    // ranks by world rank; the ranks absent are idle
  std::vector<int> layers_per_stage;  // pipeline order
  int micro_batch_sequences = 1;
  int micro_batches = 1;              // per replica per step
  int micro_batches_per_flush = 1;    // GPipe: the search's flush; 1F1B: all of them
  double predicted_iteration_s = 0;   // the simulator's, on the measured speeds
  std::vector<double> rank_tflops;    // as measured, per rank (a plan file: none)
  std::string source = "auto";        // "auto", or the plan file's path
  std::string error;                  // non-empty: bad input (the whole message); every rank has it
};

// The simulator's view of a geotrain job: the model, the global batch, the
// schedule, the exchange MpiCollectives runs, the wire formats and local
// steps of `config`; devices at `efficiency` of their measured GEMM speed.
plan::SimulationConfig job_simulation_config(const io::Config& config, const ModelShape& model,
                                             int global_batch_sequences);

// Collective over MPI_COMM_WORLD: every rank measures its device
// (measure_device; the host's memory shared by the ranks on it); rank 0
// gets every rank's measurement, in rank order (others: empty).
std::vector<DeviceMeasurement> measure_devices(kernels::Backend& backend, MatmulPrecision precision, double slowdown,
                                               double deadline_s);

// Collective over MPI_COMM_WORLD. `network` (rank 0's; others' ignored)
// gets measured device types unless it has types already (network.matrix).
JobLayout search_job_layout(const io::Config& config, const ModelShape& model, plan::Network& network,
                            kernels::Backend& backend, int global_batch_sequences, double deadline_s);

// Collective over MPI_COMM_WORLD: rank 0 reads pipeline.plan_file (what
// `geotrain plan ... --json` prints: devices, pp, dp, stages, and where the
// layout was searched or --model given, layers_per_stage, micro_batch_sequences,
// micro_batches, micro_batches_per_flush, schedule) and every rank gets it.
// Without the layout fields: the config's micro-batches, the even split.
JobLayout plan_file_layout(const io::Config& config, const ModelShape& model, double deadline_s);
// Rank 0's part: the file checked against the job. Throws
// std::invalid_argument naming the file and the field.
JobLayout read_plan_file(const io::Config& config, const ModelShape& model, int ranks);

// network.dp_exchange = auto, rank 0's part: per stage, the scheme its group
// sums by (plan::group_scheme on the group's fp32 gradient; units by their
// first rank).
std::vector<plan::DataParallelScheme> faster_exchanges(const plan::Network& network, const plan::Plan& plan,
                                                       const ModelShape& model,
                                                       const std::vector<model::StageSpec>& stages);

// Rank 0's log lines: the chosen layout, the measured speeds, idle ranks.
std::string describe(const JobLayout& layout);

// An idle rank's one line: why it has nothing to do.
std::string idle_reason(const JobLayout& layout, int rank);

}  // namespace geotrain::runtime
