// main of the MPI tests, run by ctest under mpirun (tests/CMakeLists.txt).
// Every rank runs every test (they are collective); only rank 0 prints the
// usual report, other ranks print their failures prefixed with their rank,
// and the exit status is the worst over all ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "geotrain/mpi/mpi_check.hpp"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "rank %d: %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  geotrain::runtime::MpiSession mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(mpi.rank()));
  }
  const int result = RUN_ALL_TESTS();
  int worst = result;
  GT_MPI_CHECK(MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  return worst;
}
