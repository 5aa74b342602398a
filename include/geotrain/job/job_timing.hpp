// The timing file of a job under MPI (io/timing_file.hpp's format).
#pragma once
#include <string>

#include "geotrain/common/model_shape.hpp"
#include "geotrain/io/config.hpp"
#include "geotrain/mpi/mpi_plan.hpp"
#include "geotrain/runtime/timing_record.hpp"
#include "geotrain/runtime/trainer.hpp"

namespace geotrain::runtime {

// Every training rank's events to the reporting rank (the job
// communicator's first), which writes the timing file; the others wait for
// its verdict, so the launcher does not stop it mid-write. Idle ranks have
// no events. Collective over the job's training ranks; false when the file
// could not be written (said on stderr).
bool write_job_timing(const std::string& path, const io::Config& config, const ModelShape& model,
                      const JobDescription& job, const TrainResult& result, const Topology& topology, int world_size,
                      double deadline_s);

}  // namespace geotrain::runtime
