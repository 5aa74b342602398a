#include "kernel_test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace geotrain::test {
namespace {
std::string margin_label = std::getenv("KERNELS_VERBOSE") != nullptr ? "golden" : "";

bool agree(float got, float want, double allowed) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  return std::abs(static_cast<double>(got) - want) <= allowed;
}
}  // namespace

void PrintMargins(const std::string& label) { margin_label = label; }

::testing::AssertionResult AllClose(const std::string& what, const std::vector<float>& got,
                                    const std::vector<float>& want, Tolerance tolerance) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": " << got.size() << " elements, expected " << want.size();
  }
  double largest = 0.0;
  for (float w : want) {
    if (!std::isnan(w)) largest = std::max(largest, std::abs(static_cast<double>(w)));
  }
  std::size_t failures = 0, worst_failure = 0;
  double worst_failure_excess = -1.0, worst_error = 0.0, worst_fraction = 0.0;
  std::ostringstream first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double allowed = tolerance.abs + tolerance.rel * std::abs(static_cast<double>(want[i])) +
                           tolerance.of_largest * largest;
    const double error = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!agree(got[i], want[i], allowed)) {
      if (failures++ < 5) first << "\n  [" << i << "] got " << got[i] << ", want " << want[i];
      const double excess = std::isnan(error) ? INFINITY : error / allowed;
      if (excess > worst_failure_excess) {
        worst_failure_excess = excess;
        worst_failure = i;
      }
    } else if (!std::isnan(error)) {
      worst_error = std::max(worst_error, error);
      if (allowed > 0.0) worst_fraction = std::max(worst_fraction, error / allowed);
    }
  }
  if (failures > 0) {
    return ::testing::AssertionFailure()
           << what << ": " << failures << " of " << got.size() << " elements outside |got - want| <= "
           << tolerance.abs << " + " << tolerance.rel << " |want| + " << tolerance.of_largest << " max|want| ("
           << largest << "); worst [" << worst_failure << "] got " << got[worst_failure] << ", want "
           << want[worst_failure] << first.str();
  }
  if (!margin_label.empty()) {
    std::printf("%s %-48s max|got-want|/max|want| = %.3e (worst element at %.2g of its allowed error)\n",
                margin_label.c_str(), what.c_str(), worst_error / std::max(largest, 1e-30), worst_fraction);
  }
  return ::testing::AssertionSuccess();
}

std::vector<float> NaNs(std::size_t count) { return std::vector<float>(count, std::numeric_limits<float>::quiet_NaN()); }

std::vector<float> Scaled(std::vector<float> values, float factor) {
  for (float& v : values) v *= factor;
  return values;
}

float Mean(const std::vector<float>& values) {
  double sum = 0.0;
  for (float v : values) sum += v;
  return static_cast<float>(sum / static_cast<double>(values.size()));
}

namespace {
float* allocate(kernels::Backend& backend, std::size_t count, float*) { return backend.alloc(count); }
int* allocate(kernels::Backend& backend, std::size_t count, int*) { return backend.alloc_tokens(count); }
std::uint16_t* allocate(kernels::Backend& backend, std::size_t count, std::uint16_t*) {
  return backend.alloc_bf16(count);
}
void copy_in(kernels::Backend& backend, float* device, const float* host, std::size_t count) {
  backend.upload(device, host, count);
}
void copy_in(kernels::Backend& backend, int* device, const int* host, std::size_t count) {
  backend.upload_tokens(device, host, count);
}
}  // namespace

template <class T>
DeviceBuffer<T>::DeviceBuffer(kernels::Backend& backend, std::size_t count)
    : backend_(backend), pointer_(allocate(backend, count, static_cast<T*>(nullptr))), count_(count) {}

template <class T>
DeviceBuffer<T>::DeviceBuffer(kernels::Backend& backend, const std::vector<T>& host)
    : DeviceBuffer(backend, host.size()) {
  copy_in(backend_, pointer_, host.data(), count_);
}

template <class T>
DeviceBuffer<T>::~DeviceBuffer() {
  backend_.release(pointer_);
}

template <class T>
std::vector<T> DeviceBuffer<T>::download() const {
  std::vector<T> host(count_);
  backend_.download(host.data(), pointer_, count_);
  backend_.synchronize();
  return host;
}

template class DeviceBuffer<float>;
// Tokens are uploaded, never read back: no download for them.
template DeviceBuffer<int>::DeviceBuffer(kernels::Backend&, std::size_t);
template DeviceBuffer<int>::DeviceBuffer(kernels::Backend&, const std::vector<int>&);
template DeviceBuffer<int>::~DeviceBuffer();
// bf16 storage is written and read by the ops only (to_bf16 / from_bf16).
template DeviceBuffer<std::uint16_t>::DeviceBuffer(kernels::Backend&, std::size_t);
template DeviceBuffer<std::uint16_t>::~DeviceBuffer();

std::string NeedsRealGpu(const std::string& why) {
  return "needs a real GPU (" + why +
         "): skipped under the CUDA emulation (cuda-emu preset); runs with the cuda preset on a GPU (tests/gpu/run.sh)";
}

}  // namespace geotrain::test
