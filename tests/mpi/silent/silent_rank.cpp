// One rank of the job never answers; the others run the network probe and
// must abort within the deadline with a message naming it (checked by
// expect_named_abort.sh). Usage: silent_rank SILENT_RANK DEADLINE_S [start|mid-probe]
// start: the rank never answers at all (the roll call names it);
// mid-probe: it answers the roll call, then stops (its probe partner names it).
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "geotrain/mpi/mpi_check.hpp"
#include "geotrain/mpi/mpi_probe.hpp"

int main(int argc, char** argv) {
  geotrain::runtime::MpiSession mpi(&argc, &argv);
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: silent_rank SILENT_RANK DEADLINE_S [start|mid-probe]\n");
    return 2;
  }
  const int silent = std::atoi(argv[1]);
  const bool mid_probe = argc == 4 && std::strcmp(argv[3], "mid-probe") == 0;
  if (mpi.rank() == silent && !mid_probe) {
    for (;;) ::sleep(1);  // alive but silent; mpirun kills it when another rank aborts
  }
  geotrain::runtime::ProbeOptions options;
  options.large_bytes = 64 << 10;
  options.deadline_s = std::atof(argv[2]);
  if (mid_probe) options.silent_rank_for_testing = silent;
  geotrain::runtime::probe_network(MPI_COMM_WORLD, options);
  std::fprintf(stderr, "rank %d: the probe finished although rank %d never answered\n", mpi.rank(), silent);
  return 3;
}
