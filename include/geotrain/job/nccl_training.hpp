// The trainer's links and collectives over NCCL, for ranks that train on a
// GPU: the data stays in device memory. Communicators are built from the
// MPI topology (the unique id travels over MPI, each wait with the deadline):
//   - one per data-parallel group (gradient all-reduce) and one per tied
//     first/last stage pair (embedding);
//   - two per pipeline boundary, one per direction, so that on each
//     communicator one rank only sends and the other only receives, in
//     micro-batch order (NCCL needs the same operation order on every
//     member; a rank that sent and received on one communicator from two
//     streams could deadlock).
// Scalars (losses, norms, timings) still go over MPI.
// Waits poll CUDA events against the deadline; on expiry the communicators
// are aborted and the job stops naming the peer, as with MPI.
#pragma once
#include <memory>

#include "geotrain/kernels/backend.hpp"
#include "geotrain/runtime/gradient_sync.hpp"
#include "geotrain/mpi/mpi_plan.hpp"
#include "geotrain/job/mpi_training.hpp"
#include "geotrain/runtime/pipeline.hpp"

namespace geotrain::runtime {

// Both are collective over the topology's communicators, like make_topology.
std::unique_ptr<PipelineLinks> make_nccl_links(const Topology& topology, kernels::Backend& backend,
                                               double deadline_s);
// Tensor parallelism on GPUs: the unit's sums with NCCL (device memory stays there).
std::unique_ptr<model::TensorGroup> make_nccl_tensor_group(const Topology& topology, kernels::Backend& backend,
                                                           double deadline_s);
std::unique_ptr<Collectives> make_nccl_collectives(const Topology& topology, kernels::Backend& backend,
                                                   MpiCollectives& scalars, double deadline_s);

}  // namespace geotrain::runtime
