// make_backend: names, the CUDA fallback, and the errors a user sees.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "geotrain/io/errors.hpp"
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
  const auto backend = kernels::make_backend("cpu");
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->kind(), DeviceKind::cpu);
  EXPECT_EQ(kernels::make_cpu_backend()->kind(), DeviceKind::cpu);
}

TEST(BackendFactory, AutoPicksCudaOnlyWhenUsable) {
  const CudaAvailability cuda = probe_cuda();
  const auto backend = kernels::make_backend("auto");
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
      kernels::make_backend("cuda");
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
    EXPECT_EQ(kernels::make_backend("cuda")->kind(), DeviceKind::cuda);
  } else {
    EXPECT_FALSE(cuda.reason.empty());
    EXPECT_THROW(kernels::make_backend("cuda"), geotrain::RunError);
  }
}

TEST(BackendFactory, UnknownNameIsAnInputErrorListingTheChoices) {
  for (const std::string name : {"bogus", "", "CPU", "gpu"}) {
    try {
      kernels::make_backend(name);
      FAIL() << "make_backend(\"" << name << "\") succeeded";
    } catch (const geotrain::InputError& error) {
      EXPECT_EQ(std::string(error.what()), "device: unknown device '" + name + "' (cpu, cuda or auto)");
    }
  }
}

}  // namespace
}  // namespace geotrain::test
