#include "geotrain/runtime/device_probe.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>

namespace geotrain::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

}  // namespace

void emulate_slowdown(double factor, double elapsed_s) {
  if (factor <= 1.0 || !(elapsed_s > 0)) return;
  std::this_thread::sleep_for(std::chrono::duration<double>((factor - 1.0) * elapsed_s));
}

DeviceMeasurement measure_device(kernels::Backend& backend, MatmulPrecision precision, double slowdown,
                                 int ranks_on_host, double seconds) {
  // One 768-wide projection of 512 tokens: large enough for the GEMM's
  // speed, small enough for a CPU to finish several in a quarter second.
  const int rows = 512, in = 768, out = 768;
  float* input = backend.alloc(static_cast<std::size_t>(rows) * in);
  float* weight = backend.alloc(static_cast<std::size_t>(out) * in);
  float* output = backend.alloc(static_cast<std::size_t>(rows) * out);
  backend.set_matmul_precision(precision);
  backend.matmul_forward(output, input, weight, nullptr, rows, in, out);  // warm-up: threads, handles
  backend.synchronize();
  int calls = 0;
  double busy_s = 0;
  while (calls < 2 || busy_s < seconds) {
    const auto start = Clock::now();
    backend.matmul_forward(output, input, weight, nullptr, rows, in, out);
    backend.synchronize();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    emulate_slowdown(slowdown, elapsed);
    busy_s += elapsed * std::max(1.0, slowdown);
    ++calls;
  }
  for (float* p : {input, weight, output}) backend.release(p);
  DeviceMeasurement m;
  m.tflops = 2.0 * rows * in * out * calls / busy_s / 1e12;
  m.memory_bytes = backend.device_memory_bytes();
  if (m.memory_bytes <= 0) m.memory_bytes = host_memory_bytes() / std::max(1, ranks_on_host);
  return m;
}

void set_measured_types(plan::Network& network, const std::vector<DeviceMeasurement>& devices, double tolerance) {
  if (static_cast<int>(devices.size()) != network.device_count) {
    throw std::invalid_argument("set_measured_types: " + std::to_string(devices.size()) + " measurements for " +
                                std::to_string(network.device_count) + " devices");
  }
  std::vector<int> order(devices.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return devices[a].tflops > devices[b].tflops; });
  network.device_types.clear();
  network.type_of_device.assign(devices.size(), 0);
  std::vector<int> members;
  auto close_type = [&] {
    if (members.empty()) return;
    plan::DeviceType type;
    type.name = "measured-" + std::to_string(network.device_types.size() + 1);
    double sum = 0;
    type.memory_bytes = devices[members.front()].memory_bytes;
    for (int d : members) {
      sum += devices[d].tflops;
      type.memory_bytes = std::min(type.memory_bytes, devices[d].memory_bytes);
      network.type_of_device[d] = static_cast<int>(network.device_types.size());
    }
    type.tflops = sum / static_cast<double>(members.size());
    network.device_types.push_back(type);
    members.clear();
  };
  for (int d : order) {
    if (!members.empty() && devices[d].tflops < (1.0 - tolerance) * devices[members.front()].tflops) close_type();
    members.push_back(d);
  }
  close_type();
}

}  // namespace geotrain::runtime
