// Parallel HDF5: one checkpoint file written by several processes at once
// through MPI-IO (checkpoint.form = parallel: the whole checkpoint in one
// file; per_site: one shard per site, each written by that site's ranks).
// Built where CMake finds the parallel HDF5 library (libhdf5-openmpi-dev);
// elsewhere parallel_hdf5_built() is false and the writer throws.
#pragma once
#include <string>

#include "geotrain/io/checkpoint.hpp"

namespace geotrain::io {

bool parallel_hdf5_built();

// What the collectively written file is: a whole single-form checkpoint
// (step_N.h5, every attribute of checkpoint.hpp), or a shard of the sharded
// layout (step_N/<shard>.h5: format_version, completed_steps, shard = 1).
enum class CollectiveFile { whole, shard };

// Collective over the communicator whose Fortran handle is `comm`
// (MPI_Comm_c2f; io itself does not depend on MPI's headers). Every member
// calls it with its own `part` (tensors and residuals, possibly none), from
// one thread per process; that thread may run beside the process's other
// MPI traffic (the job then needs MPI_THREAD_MULTIPLE).
//  1. the members exchange the names and shapes of their tensors;
//  2. `path`.tmp is created collectively with every member's datasets, and
//     each member writes its own tensors' bytes (independent MPI-IO: no
//     tensor travels between processes, only metadata does);
//  3. the members agree whether every write succeeded; the communicator's
//     rank 0 then adds the root attributes from its `part` (as `kind` says),
//     flushes the file to disk and renames it to `path`.
// Throws RunError naming the file on every member when any member failed.
// `tensors_written` (checkpoint.hpp) is called on each member once its own
// tensors are written, before the collective close.
void write_checkpoint_collectively(int comm, const std::string& path, const Checkpoint& part, CollectiveFile kind,
                                   const TensorsWritten& tensors_written = {});

}  // namespace geotrain::io
