// make_backend: names, the CUDA fallback, and the errors a user sees.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "geotrain/common/errors.hpp"
#include "geotrain/kernels/backend.hpp"

namespace geotrain::test {
namespace {

using kernels::DeviceKind;

// Whether this build and machine can run CUDA; the message when not.
struct CudaAvailability {
  bool usable = false;
  std::string reason;
};

CudaAvailability probe_cuda() {
  try {
    kernels::make_cuda_backend();
    return {true, ""};
  } catch (const geotrain::RunError& error) {
    return {false, error.what()};
  }
}

TEST(BackendFactory, CpuIsAlwaysAvailable) {
  const auto backend = kernels::make_backend(DeviceRequest::cpu);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->kind(), DeviceKind::cpu);
  EXPECT_EQ(kernels::make_cpu_backend()->kind(), DeviceKind::cpu);
}

TEST(BackendFactory, AutoPicksCudaOnlyWhenUsable) {
  const CudaAvailability cuda = probe_cuda();
  const auto backend = kernels::make_backend(DeviceRequest::automatic);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->kind(), cuda.usable ? DeviceKind::cuda : DeviceKind::cpu)
      << "CUDA " << (cuda.usable ? "usable" : "not usable: " + cuda.reason);
  if (!kernels::cuda_compiled()) {
    EXPECT_EQ(backend->kind(), DeviceKind::cpu);
  }
}

TEST(BackendFactory, CudaWithoutSupportIsARunErrorThatSaysWhy) {
  if (!kernels::cuda_compiled()) {
    try {
      kernels::make_backend(DeviceRequest::cuda);
      FAIL() << "make_backend(\"cuda\") succeeded in a build without CUDA";
    } catch (const geotrain::RunError& error) {
      EXPECT_NE(std::string(error.what()).find("built without the CUDA backend"), std::string::npos)
          << error.what();
      EXPECT_NE(std::string(error.what()).find("cuda preset"), std::string::npos) << error.what();
    }
    return;
  }
  // Compiled in: either a GPU is usable, or the failure is a RunError with a message.
  const CudaAvailability cuda = probe_cuda();
  if (cuda.usable) {
    EXPECT_EQ(kernels::make_backend(DeviceRequest::cuda)->kind(), DeviceKind::cuda);
  } else {
    EXPECT_FALSE(cuda.reason.empty());
    EXPECT_THROW(kernels::make_backend(DeviceRequest::cuda), geotrain::RunError);
  }
}

TEST(BackendFactory, DeviceNamesParseOnlyToTheirChoice) {
  DeviceRequest device = DeviceRequest::cuda;
  for (const std::string name : {"bogus", "", "CPU", "gpu"}) EXPECT_FALSE(parse_device_request(name, &device)) << name;
  EXPECT_EQ(device, DeviceRequest::cuda);  // untouched by a failed parse
  ASSERT_TRUE(parse_device_request("cpu", &device));
  EXPECT_EQ(device, DeviceRequest::cpu);
  ASSERT_TRUE(parse_device_request("auto", &device));
  EXPECT_EQ(device, DeviceRequest::automatic);
}

}  // namespace
}  // namespace geotrain::test
