// How the emulation runs, read once from the environment (README.md):
//   CUDA_EMU_ORDER       forward | reverse | random | warp-ahead  order of threads (and blocks)
//   CUDA_EMU_DEFERRED=1  stream work waits for the next synchronisation point
//   CUDA_EMU_POISON=0    fresh device and shared memory is not filled with NaN
//   CUDA_EMU_TRACE=1     every launch printed to stderr
//   CUDA_EMU_LAUNCH_LOG  a file that gets the names of the kernels run, one a line, at exit
#pragma once

#include <string>

namespace cuda_emu {

enum class ThreadOrder { forward, reverse, random, warp_ahead };

struct Settings {
  ThreadOrder order = ThreadOrder::forward;
  bool deferred = false;
  bool poison = true;
  bool trace = false;
  std::string launch_log;
};

const Settings& settings();

}  // namespace cuda_emu
