// The checked-call family: every MPI, CUDA, cuBLAS, NCCL and HDF5 call goes
// through its library's macro,
//
//   GT_MPI_CHECK(call)                   mpi/mpi_check.hpp
//   GT_CUDA_CHECK(call), GT_CUDA_WARN    common/cuda_check.hpp (CUDA runtime, cuBLAS)
//   GT_NCCL_CHECK(call)                  job/nccl_training.cpp (its only user)
//   GT_H5_CHECK(call, context, reading)  io/hdf5_support.hpp
//
// Each adapter knows only its library's success value and error string; a
// failed call is described here, one way for all:
//
//   <library> error at <file>:<line>: <call> failed: <the library's error string>
//
// and handed to the failure handler. The kernels and io do not link MPI, so
// stopping every rank is an action the MPI session installs (abort_all: the
// line with rank and host, then MPI_Abort). Without it a failure is thrown
// as RunError naming the host, which a one-process run reports as one line
// with exit code 1. HDF5 always throws, for the reason in hdf5_support.hpp.
#pragma once
#include <string>

#include "geotrain/common/non_copyable.hpp"

namespace geotrain {

struct CallSite {
  const char* library;
  const char* call;  // the call's source text
  const char* file;
  int line;
};

std::string describe_failed_call(const CallSite& site, const std::string& error);

// Takes describe_failed_call's line; must not return.
using CallFailureHandler = void (*)(const std::string& description);

// Returns the handler it replaces; nullptr restores the default (throw RunError).
CallFailureHandler set_call_failure_handler(CallFailureHandler handler);

// Describes the failure and runs the handler, or throws RunError inside a
// ThrowFailedCalls scope.
[[noreturn]] void call_failed(const CallSite& site, const std::string& error);

// For destructors and clean-ups, which must go on: the line on stderr only.
void warn_failed_call(const CallSite& site, const std::string& error) noexcept;

// While one lives, failed calls on this thread throw RunError whatever the
// handler: for a caller that recovers from them (make_backend("auto") falls
// back to the CPU when a GPU cannot be set up, also under mpirun).
class ThrowFailedCalls : NonCopyable {
 public:
  ThrowFailedCalls();
  ~ThrowFailedCalls();
};

// This machine's name, for reports ("unknown host" if the system has none).
const std::string& host_name();

}  // namespace geotrain
