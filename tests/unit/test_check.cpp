// The checked-call family's report and its failure handler (common/check.hpp).
#include <gtest/gtest.h>

#include <string>

#include "geotrain/common/check.hpp"
#include "geotrain/common/errors.hpp"

namespace geotrain {
namespace {

const CallSite kSite{"MPI", "MPI_Send(buffer, 1, MPI_INT, 1, 0, comm)", "/any/build/tree/src/runtime/x.cpp", 12};
const std::string kDescription =
    "MPI error at src/runtime/x.cpp:12: MPI_Send(buffer, 1, MPI_INT, 1, 0, comm) failed: MPI_ERR_RANK: invalid rank";

struct Handled {
  std::string description;
};
[[noreturn]] void throw_handled(const std::string& description) { throw Handled{description}; }

std::string thrown_run_error() {
  try {
    call_failed(kSite, "MPI_ERR_RANK: invalid rank");
  } catch (const RunError& e) {
    return e.what();
  }
  return "";
}

TEST(CheckedCall, DescribesLibraryPlaceCallAndError) {
  EXPECT_EQ(describe_failed_call(kSite, "MPI_ERR_RANK: invalid rank"), kDescription);
}

TEST(CheckedCall, WithoutAHandlerThrowsRunErrorNamingTheHost) {
  EXPECT_EQ(thrown_run_error(), kDescription + " on host " + host_name());
}

TEST(CheckedCall, AnInstalledHandlerGetsTheDescription) {
  const CallFailureHandler previous = set_call_failure_handler(throw_handled);
  try {
    call_failed(kSite, "MPI_ERR_RANK: invalid rank");
    ADD_FAILURE() << "call_failed returned";
  } catch (const Handled& handled) {
    EXPECT_EQ(handled.description, kDescription);
  }
  set_call_failure_handler(previous);
}

TEST(CheckedCall, ACallerThatRecoversGetsRunErrorDespiteTheHandler) {
  const CallFailureHandler previous = set_call_failure_handler(throw_handled);
  {
    const ThrowFailedCalls recoverable;
    EXPECT_EQ(thrown_run_error(), kDescription + " on host " + host_name());
  }
  EXPECT_THROW(call_failed(kSite, "MPI_ERR_RANK: invalid rank"), Handled);
  set_call_failure_handler(previous);
}

}  // namespace
}  // namespace geotrain
