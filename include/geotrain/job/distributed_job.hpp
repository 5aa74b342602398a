// geotrain train as an MPI job (every rank runs it): inputs read and checked
// on every rank, the network probed (or network.matrix read), the plan made
// on rank 0 and broadcast, communicators built, the model trained.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

namespace geotrain::runtime {

// Returns the process exit code: 0, 2 for bad input (the same on every rank;
// the lowest failing rank prints one line), 1 for a run-time failure. A rank
// that fails alone later aborts the job through MPI_Abort.
int run_distributed_training(const std::string& config_file, const std::vector<std::string>& overrides,
                             std::ostream& log);

// geotrain eval as an MPI job: the same start-up (inputs checked on every
// rank, network, plan, communicators) on the config's layout, then the
// validation loss of checkpoint.resume instead of training; rank 0 prints it.
// Writes no file. Exit codes as above.
int run_distributed_evaluation(const std::string& config_file, const std::vector<std::string>& overrides,
                               std::ostream& log);

// True when this process was started by an MPI launcher (mpirun, srun, ...).
bool launched_by_mpi();

}  // namespace geotrain::runtime
