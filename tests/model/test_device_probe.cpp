// Device measurements (runtime/device_probe.hpp): grouping into types, the
// emulated slowdown, and a real GEMM measurement on the CPU backend.
#include <gtest/gtest.h>

#include <chrono>

#include "geotrain/kernels/backend.hpp"
#include "geotrain/runtime/device_probe.hpp"

namespace {

using geotrain::runtime::DeviceMeasurement;
using geotrain::runtime::set_measured_types;

geotrain::plan::Network untyped(int devices) {
  geotrain::plan::Network net;
  net.device_count = devices;
  net.latency_s.assign(static_cast<std::size_t>(devices * devices), 1e-4);
  net.bandwidth_bytes_per_s.assign(net.latency_s.size(), 1e9);
  return net;
}

TEST(DeviceProbe, DevicesWithinTheToleranceShareATypeFastestFirst) {
  geotrain::plan::Network net = untyped(5);
  // By hand: 10 and 9 (within 15% of 10) -> measured-1, speed 9.5, memory
  // min(8, 6) = 6; 2.1 and 2.0 -> measured-2, speed 2.05; 8.4 is 16% below
  // 10: a type of its own, between them.
  const std::vector<DeviceMeasurement> devices = {{2.1, 4}, {10, 8}, {8.4, 5}, {9, 6}, {2.0, 3}};
  set_measured_types(net, devices);
  ASSERT_EQ(net.device_types.size(), 3u);
  EXPECT_EQ(net.device_types[0].name, "measured-1");
  EXPECT_DOUBLE_EQ(net.device_types[0].tflops, 9.5);
  EXPECT_DOUBLE_EQ(net.device_types[0].memory_bytes, 6);
  EXPECT_DOUBLE_EQ(net.device_types[1].tflops, 8.4);
  EXPECT_DOUBLE_EQ(net.device_types[2].tflops, 2.05);
  EXPECT_DOUBLE_EQ(net.device_types[2].memory_bytes, 3);
  EXPECT_EQ(net.type_of_device, (std::vector<int>{2, 0, 1, 0, 2}));
}

TEST(DeviceProbe, OneMeasurementPerDevice) {
  geotrain::plan::Network net = untyped(3);
  EXPECT_THROW(set_measured_types(net, {{1, 1}, {1, 1}}), std::invalid_argument);
}

TEST(DeviceProbe, SlowdownStretchesTheMeasuredTime) {
  const auto start = std::chrono::steady_clock::now();
  geotrain::runtime::emulate_slowdown(3.0, 0.02);  // sleeps 2 x 20 ms
  const double slept = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(slept, 0.04);
  const auto again = std::chrono::steady_clock::now();
  geotrain::runtime::emulate_slowdown(1.0, 10.0);  // no slowdown: returns at once
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - again).count(), 1.0);
}

TEST(DeviceProbe, CpuMeasurementIsPositiveAndSlowdownLowersIt) {
  auto backend = geotrain::kernels::make_backend(geotrain::DeviceRequest::cpu);
  const DeviceMeasurement plain = geotrain::runtime::measure_device(*backend, geotrain::MatmulPrecision::fp32, 1.0, 1, 0.05);
  const DeviceMeasurement slowed = geotrain::runtime::measure_device(*backend, geotrain::MatmulPrecision::fp32, 5.0, 1, 0.05);
  EXPECT_GT(plain.tflops, 0);
  EXPECT_GT(plain.memory_bytes, 0);  // the host's
  // Five times as long per GEMM: well under half the speed even on a noisy machine.
  EXPECT_LT(slowed.tflops, 0.5 * plain.tflops);
}

}  // namespace
