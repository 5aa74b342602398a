#include "block_state.hpp"

#include <algorithm>

namespace cuda_emu {

namespace {
unsigned lanes_mask(unsigned size) { return size == 32 ? 0xffffffffu : (1u << size) - 1; }
}  // namespace

void BlockState::reset(dim3 block) {
  threads = block.x * block.y * block.z;
  exited = at_barrier = 0;
  lanes.resize(threads);
  for (unsigned i = 0; i < threads; ++i) {
    lanes[i] = Lane{{i % block.x, i / block.x % block.y, i / (block.x * block.y)}, i, i % 32, i / 32, 0};
  }
  for (unsigned w = 0; w < (threads + 31) / 32; ++w) {
    warps[w] = WarpState{};
    warps[w].size = std::min(32u, threads - 32 * w);
    warps[w].alive = lanes_mask(warps[w].size);
  }
}

bool BlockState::warp_arrive(Lane& lane, std::uint64_t value, unsigned mask, const char* what) {
  WarpState& warp = warps[lane.warp];
  if (!(mask & (1u << lane.lane))) fatal("%s: calling lane %u is not in mask 0x%08x", what, lane.lane, mask);
  if (mask & ~lanes_mask(warp.size)) {
    fatal("%s: mask 0x%08x names lanes that do not exist (warp of %u lanes)", what, mask, warp.size);
  }
  if (warp.arrived == 0) warp.expected = mask;
  if (warp.expected != mask) {
    fatal("%s: lanes of one warp use different masks (0x%08x, 0x%08x)", what, warp.expected, mask);
  }
  const unsigned buffer = lane.collectives_done++ & 1;
  warp.values[buffer][lane.lane] = value;
  warp.arrived |= 1u << lane.lane;
  return warp_complete(warp, buffer, what);
}

bool BlockState::warp_complete(WarpState& warp, unsigned buffer, const char* what) {
  if (warp.arrived == 0 || (warp.arrived & warp.expected & warp.alive) != (warp.expected & warp.alive)) return false;
  if (warp.expected & ~warp.alive) {
    fatal("%s: mask 0x%08x names lanes that have exited (alive 0x%08x): undefined behaviour", what, warp.expected,
          warp.alive);
  }
  warp.present[buffer] = warp.arrived;
  warp.arrived = 0;
  return true;
}

bool BlockState::barrier_arrive() {
  ++at_barrier;
  return barrier_complete();
}

bool BlockState::barrier_complete() {
  // Exited threads no longer hold a barrier up (as on a GPU since Volta).
  if (at_barrier == 0 || at_barrier + exited != threads) return false;
  at_barrier = 0;
  return true;
}

}  // namespace cuda_emu
