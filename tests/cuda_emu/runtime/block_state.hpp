// The bookkeeping of the block being run: which lanes wait at the block
// barrier, which at a warp collective, which have exited.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda_emu_engine.hpp"

namespace cuda_emu {

struct WarpState {
  unsigned size = 0;       // lanes that exist
  unsigned alive = 0;      // lanes that have not exited
  unsigned arrived = 0;    // lanes waiting at the current collective
  unsigned expected = 0;   // the current collective's mask
  unsigned present[2] = {};  // who took part, per exchange buffer
  // Two buffers: a lane may start its next collective while slower lanes
  // still read the values of the previous one.
  std::uint64_t values[2][32] = {};
};

struct BlockState {
  unsigned threads = 0, exited = 0, at_barrier = 0;
  WarpState warps[32];
  std::vector<Lane> lanes;

  void reset(dim3 block);
  // A lane arrives at a warp collective; true when its arrival completes it.
  bool warp_arrive(Lane& lane, std::uint64_t value, unsigned mask, const char* what);
  bool warp_complete(WarpState& warp, unsigned buffer, const char* what);
  // True when this arrival (or an exit) completes the barrier.
  bool barrier_arrive();
  bool barrier_complete();
};

}  // namespace cuda_emu
