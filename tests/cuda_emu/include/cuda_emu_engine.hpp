// The emulation's engine as kernels and launches see it: the running CUDA
// thread, block barriers, warp exchanges, device-memory checks, and the
// launch object that kernel<<<...>>>(args) becomes (chevrons.sed).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_emu_api.hpp"

namespace cuda_emu {

struct Lane {
  uint3 thread_idx;
  unsigned linear, lane, warp;
  unsigned collectives_done;  // selects the warp's exchange buffer
};
struct GridState {
  dim3 grid, block;
  uint3 block_idx;
};
inline thread_local Lane* current_lane = nullptr;
inline GridState grid_state;

// Runs body(closure) once per CUDA thread of every block (runtime/scheduler.cpp).
void run_grid(dim3 grid, dim3 block, void (*body)(const void*), const void* closure, const char* kernel_name);
void syncthreads();
// A warp collective: every active lane gives `value`; returns the warp's 32
// values (valid until this lane's next collective) and in `present` the lanes
// that took part. A mask that names exited lanes is reported.
const std::uint64_t* warp_exchange(std::uint64_t value, unsigned mask, unsigned* present, const char* what);
[[noreturn]] void fatal(const char* format, ...) __attribute__((format(printf, 1, 2)));
// True when [p, p + bytes) lies inside one cudaMalloc allocation.
bool is_device_range(const void* p, std::size_t bytes);
void set_launch_error(cudaError_t error);
// Runs `work` now, or at the stream's next synchronisation point under CUDA_EMU_DEFERRED=1.
void enqueue(cudaStream_t stream, std::function<void()> work);

template <class T>
T shuffle_from(T value, unsigned mask, unsigned source_lane, const char* what) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  unsigned present = 0;
  const std::uint64_t* values = warp_exchange(bits, mask, &present, what);
  if (source_lane >= 32 || !(present & (1u << source_lane))) {
    fatal("%s: lane %u reads lane %u, which has exited or does not exist (mask 0x%08x, present 0x%08x)", what,
          current_lane->lane, source_lane, mask, present);
  }
  T out;
  std::memcpy(&out, &values[source_lane], sizeof(T));
  return out;
}

template <class T>
void check_kernel_argument(const T& value, const char* kernel, int index) {
  if constexpr (std::is_pointer_v<T>) {
    if (value != nullptr && !is_device_range(value, 0)) {
      fatal("kernel %s: argument %d (%p) is not device memory", kernel, index, static_cast<const void*>(value));
    }
  }
}

inline bool launch_configuration_valid(dim3 grid, dim3 block, std::size_t shared_bytes) {
  const auto within = [](unsigned v, unsigned max) { return v >= 1 && v <= max; };
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  return within(grid.x, 0x7fffffffu) && within(grid.y, 65535) && within(grid.z, 65535) && within(block.x, 1024) &&
         within(block.y, 1024) && within(block.z, 64) && threads <= 1024 && shared_bytes <= 48 * 1024;
}

template <class... Params>
struct Launch {
  void (*kernel)(Params...);
  dim3 grid, block;
  std::size_t shared_bytes;
  cudaStream_t stream;
  const char* name;

  template <class... Args>
  void operator()(Args&&... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params), "kernel launched with the wrong number of arguments");
    // As on a GPU: the arguments are converted to the parameter types and copied at the launch.
    using Values = std::tuple<std::decay_t<Params>...>;
    auto values = std::make_shared<Values>(static_cast<std::decay_t<Params>>(std::forward<Args>(args))...);
    if (!launch_configuration_valid(grid, block, shared_bytes)) {
      set_launch_error(cudaErrorInvalidConfiguration);
      return;
    }
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (check_kernel_argument(std::get<I>(*values), name, static_cast<int>(I)), ...);
    }(std::index_sequence_for<Params...>{});
    struct Closure {
      void (*kernel)(Params...);
      std::shared_ptr<Values> values;
    };
    enqueue(stream, [closure = Closure{kernel, values}, g = grid, b = block, n = name] {
      run_grid(g, b, [](const void* p) {
        const auto* c = static_cast<const Closure*>(p);
        std::apply(c->kernel, *c->values);  // by value: every CUDA thread gets its own copy
      }, &closure, n);
    });
  }
};

template <class... Params>
Launch<Params...> make_launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                              std::size_t shared_bytes = 0, cudaStream_t stream = nullptr) {
  return Launch<Params...>{kernel, grid, block, shared_bytes, stream, name};
}

template <class T>
T atomic_update(T* address, T (*combine)(T, T), T operand) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (!ref.compare_exchange_weak(old, combine(old, operand))) {
  }
  return old;
}

}  // namespace cuda_emu

#define CUDA_EMU_LAUNCH(kernel, ...) ::cuda_emu::make_launch(#kernel, kernel, __VA_ARGS__)
