// StagedBuffer on the CPU backend, whose device memory is host memory: a
// device-memory transport gets the very pointer; a host-memory transport gets
// a copy, and the device memory changes only when written() delivers it.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "geotrain/runtime/staged_buffer.hpp"

namespace geotrain::runtime {
namespace {

constexpr bool kDeviceMemory = true, kHostMemory = false;

class StagedBufferTest : public ::testing::Test {
 protected:
  std::unique_ptr<kernels::Backend> backend = kernels::make_cpu_backend();
  StagedBuffer staged{*backend};
  std::vector<float> device = {1, 2, 3};
};

TEST_F(StagedBufferTest, DeviceMemoryTransportGetsTheBufferItself) {
  EXPECT_EQ(staged.readable(device.data(), 3, kDeviceMemory), device.data());
  EXPECT_EQ(staged.writable(device.data(), 3, kDeviceMemory), device.data());
  EXPECT_EQ(staged.updatable(device.data(), 3, kDeviceMemory), device.data());
  staged.written();
  EXPECT_EQ(device, (std::vector<float>{1, 2, 3}));
}

TEST_F(StagedBufferTest, HostMemoryTransportReadsACopy) {
  const float* copy = staged.readable(device.data(), 3, kHostMemory);
  EXPECT_NE(copy, device.data());
  EXPECT_EQ(std::vector<float>(copy, copy + 3), device);
}

TEST_F(StagedBufferTest, HostMemoryTransportWritesReachTheDeviceOnWritten) {
  float* target = staged.writable(device.data(), 3, kHostMemory);
  target[0] = 7, target[1] = 8, target[2] = 9;
  EXPECT_EQ(device, (std::vector<float>{1, 2, 3}));
  staged.written();
  EXPECT_EQ(device, (std::vector<float>{7, 8, 9}));
}

TEST_F(StagedBufferTest, HostMemoryTransportUpdatesInPlace) {
  float* sum = staged.updatable(device.data(), 3, kHostMemory);
  for (int i = 0; i < 3; ++i) sum[i] *= 2;
  staged.written();
  EXPECT_EQ(device, (std::vector<float>{2, 4, 6}));
  device[0] = 5;
  staged.written();  // delivered already: nothing is copied again
  EXPECT_EQ(device, (std::vector<float>{5, 4, 6}));
}

}  // namespace
}  // namespace geotrain::runtime
