// Runs a grid: blocks one after another, the threads of a block as fibers.
// A thread runs until it waits (barrier, warp collective) or exits; then the
// next ready thread in the chosen order runs. No ready thread while some wait
// is a deadlock, reported with the kernel's name.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "block_state.hpp"
#include "cuda_emu_engine.hpp"
#include "fiber.hpp"
#include "settings.hpp"

extern "C" char __start_cuda_emu_shared[] __attribute__((weak));
extern "C" char __stop_cuda_emu_shared[] __attribute__((weak));

namespace cuda_emu {
namespace {

enum class FiberState { ready, waiting, done };

BlockState block;
std::vector<Fiber> fibers;
std::vector<FiberState> fiber_states;
std::vector<unsigned> run_order, place_in_order;
void* scheduler_stack_pointer = nullptr;
bool switching_from_scheduler = false;
void (*grid_body)(const void*) = nullptr;
const void* grid_closure = nullptr;
const char* running_kernel = "";
std::mt19937 order_generator(12345);

// Kernels that ran, for CUDA_EMU_LAUNCH_LOG (tests/cuda_emu/check_kernel_coverage.sh).
struct LaunchLog {
  std::string path = settings().launch_log;  // a copy: written at exit, after settings() may be gone
  std::set<std::string> kernels;
  ~LaunchLog() {
    if (path.empty()) return;
    std::ofstream out(path, std::ios::app);
    for (const std::string& name : kernels) out << name << '\n';
  }
};
LaunchLog launch_log;

std::vector<unsigned> order_of(unsigned count) {
  std::vector<unsigned> order(count);
  std::iota(order.begin(), order.end(), 0u);
  if (settings().order == ThreadOrder::reverse) std::reverse(order.begin(), order.end());
  if (settings().order == ThreadOrder::random) std::shuffle(order.begin(), order.end(), order_generator);
  return order;
}

__attribute__((no_sanitize_address)) void poison_shared_memory() {
  if (!settings().poison || __start_cuda_emu_shared == nullptr) return;
  // A plain loop: under ASan the section holds redzones, which the intercepted memset would reject.
  for (volatile char* p = __start_cuda_emu_shared; p < __stop_cuda_emu_shared; ++p) *p = static_cast<char>(0xff);
}

bool is_ready(unsigned thread) { return fiber_states[thread] == FiberState::ready; }

// The thread to run after `thread` stops, or block.threads when none is
// ready. warp-ahead keeps to the thread's own warp, then takes the lowest
// ready warp: one warp runs as far ahead of the others as barriers allow,
// which exposes a missing __syncthreads.
unsigned next_ready(unsigned thread) {
  const unsigned n = block.threads;
  if (settings().order == ThreadOrder::warp_ahead) {
    const unsigned first = thread / 32 * 32, size = std::min(32u, n - first);
    for (unsigned k = 1; k <= size; ++k) {
      const unsigned candidate = first + (thread - first + k) % size;
      if (is_ready(candidate)) return candidate;
    }
    for (unsigned candidate = 0; candidate < n; ++candidate) {
      if (is_ready(candidate)) return candidate;
    }
    return n;
  }
  unsigned place = place_in_order[thread];
  for (unsigned k = 0; k < n; ++k) {
    if (++place == n) place = 0;
    if (is_ready(run_order[place])) return run_order[place];
  }
  return n;
}

// `thread` stops: the next ready thread runs at once, or the scheduler when none is.
void leave(unsigned thread, bool exiting) {
  const unsigned next = next_ready(thread);
  switching_from_scheduler = false;
  if (next < block.threads) {
    current_lane = &block.lanes[next];
    switch_context(&fibers[thread].stack_pointer, fibers[next].stack_pointer, fibers[next].stack,
                   kFiberStackBytes, exiting);
  } else {
    switch_context(&fibers[thread].stack_pointer, scheduler_stack_pointer, scheduler_stack(),
                   scheduler_stack_bytes(), exiting);
  }
}

void wake_waiting(unsigned first, unsigned count) {
  for (unsigned t = first; t < first + count; ++t) {
    if (fiber_states[t] == FiberState::waiting) fiber_states[t] = FiberState::ready;
  }
}

void wait_here(unsigned thread) {
  fiber_states[thread] = FiberState::waiting;
  leave(thread, false);
}

void thread_main(unsigned thread) {
  fiber_started(switching_from_scheduler);
  grid_body(grid_closure);
  Lane& lane = block.lanes[thread];
  fiber_states[thread] = FiberState::done;
  ++block.exited;
  WarpState& warp = block.warps[lane.warp];
  warp.alive &= ~(1u << lane.lane);
  // An exit may be what a barrier or a collective was waiting for.
  if (block.barrier_complete()) wake_waiting(0, block.threads);
  if (block.warp_complete(warp, lane.collectives_done & 1, "warp collective")) {
    wake_waiting(lane.warp * 32, warp.size);
  }
  leave(thread, true);
  __builtin_unreachable();
}

void run_block() {
  const unsigned n = block.threads;
  if (fibers.size() < n) fibers.resize(n);
  fiber_states.assign(n, FiberState::ready);
  for (unsigned t = 0; t < n; ++t) prepare_fiber(fibers[t], thread_main, t);
  while (block.exited < n) {
    const unsigned first = is_ready(run_order[0]) ? run_order[0] : next_ready(run_order[0]);
    if (first >= n) fatal("deadlock: %u of %u threads wait at barriers that cannot complete", n - block.exited, n);
    current_lane = &block.lanes[first];
    switching_from_scheduler = true;
    switch_context(&scheduler_stack_pointer, fibers[first].stack_pointer, fibers[first].stack, kFiberStackBytes,
                   false);
  }
  current_lane = nullptr;
}

}  // namespace

void fatal(const char* format, ...) {
  std::fflush(stdout);
  std::fprintf(stderr, "cuda-emu: ");
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  if (current_lane != nullptr) {
    const GridState& g = grid_state;
    const uint3 t = current_lane->thread_idx;
    std::fprintf(stderr, "\n  in kernel %s, block (%u,%u,%u) of (%u,%u,%u), thread (%u,%u,%u) of (%u,%u,%u)",
                 running_kernel, g.block_idx.x, g.block_idx.y, g.block_idx.z, g.grid.x, g.grid.y, g.grid.z, t.x, t.y,
                 t.z, g.block.x, g.block.y, g.block.z);
  }
  std::fprintf(stderr, "\n");
  std::abort();
}

void run_grid(dim3 grid, dim3 block_dim, void (*body)(const void*), const void* closure, const char* kernel_name) {
  if (settings().trace) {
    std::fprintf(stderr, "cuda-emu: %s<<<(%u,%u,%u), (%u,%u,%u)>>>\n", kernel_name, grid.x, grid.y, grid.z,
                 block_dim.x, block_dim.y, block_dim.z);
  }
  if (!settings().launch_log.empty()) launch_log.kernels.insert(kernel_name);
  running_kernel = kernel_name;
  grid_body = body;
  grid_closure = closure;
  grid_state.grid = grid;
  grid_state.block = block_dim;
  run_order = order_of(block_dim.x * block_dim.y * block_dim.z);
  place_in_order.resize(run_order.size());
  for (unsigned k = 0; k < run_order.size(); ++k) place_in_order[run_order[k]] = k;
  const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
  const bool reorder_blocks = settings().order == ThreadOrder::reverse || settings().order == ThreadOrder::random;
  const std::vector<unsigned> block_order = reorder_blocks ? order_of(static_cast<unsigned>(blocks))
                                                           : std::vector<unsigned>{};
  for (unsigned long long k = 0; k < blocks; ++k) {
    const unsigned long long b = reorder_blocks ? block_order[k] : k;
    grid_state.block_idx = uint3{static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                                 static_cast<unsigned>(b / (1ull * grid.x * grid.y))};
    block.reset(block_dim);
    poison_shared_memory();
    run_block();
  }
  running_kernel = "";
}

void syncthreads() {
  if (block.barrier_arrive()) {
    wake_waiting(0, block.threads);  // this thread goes on; the woken ones run when it stops
    return;
  }
  wait_here(current_lane->linear);
}

const std::uint64_t* warp_exchange(std::uint64_t value, unsigned mask, unsigned* present, const char* what) {
  Lane& lane = *current_lane;
  WarpState& warp = block.warps[lane.warp];
  const unsigned buffer = lane.collectives_done & 1;
  if (block.warp_arrive(lane, value, mask, what)) {
    wake_waiting(lane.warp * 32, warp.size);
  } else {
    wait_here(lane.linear);
  }
  *present = warp.present[buffer];
  return warp.values[buffer];
}

}  // namespace cuda_emu
