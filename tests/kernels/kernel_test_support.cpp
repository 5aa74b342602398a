#include "kernel_test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace geotrain::test {

::testing::AssertionResult AllClose(const std::string& what, const std::vector<float>& got,
                                    const std::vector<float>& want, Tolerance tolerance) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " elements, expected " << want.size();
  }
  std::size_t failures = 0, worst = 0;
  double worst_excess = -1.0, worst_relative = 0.0;
  std::ostringstream first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double error = std::abs(static_cast<double>(got[i]) - want[i]);
    const double allowed = tolerance.abs + tolerance.rel * std::abs(static_cast<double>(want[i]));
    // NaN compares false everywhere: count it as a failure explicitly.
    const bool ok = error <= allowed;
    if (!ok && failures++ < 5) first << "\n  [" << i << "] got " << got[i] << ", want " << want[i];
    const double excess = std::isnan(error) ? INFINITY : error / allowed;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
    if (want[i] != 0.0f) worst_relative = std::max(worst_relative, error / std::abs(want[i]));
  }
  if (failures > 0) {
    return ::testing::AssertionFailure()
           << what << ": " << failures << " of " << got.size() << " elements outside |diff| <= "
           << tolerance.abs << " + " << tolerance.rel << " |want|; worst [" << worst << "] got " << got[worst]
           << ", want " << want[worst] << first.str();
  }
  if (std::getenv("KERNELS_VERBOSE") != nullptr) {
    std::printf("  %-28s worst error %.2f of allowed, worst relative %.2e\n", what.c_str(), worst_excess,
                worst_relative);
  }
  return ::testing::AssertionSuccess();
}

std::vector<float> NaNs(std::size_t count) {
  return std::vector<float>(count, std::numeric_limits<float>::quiet_NaN());
}

std::vector<float> Scaled(std::vector<float> values, float factor) {
  for (float& v : values) v *= factor;
  return values;
}

float Mean(const std::vector<float>& values) {
  double sum = 0.0;
  for (float v : values) sum += v;
  return static_cast<float>(sum / static_cast<double>(values.size()));
}

DeviceFloats::DeviceFloats(kernels::Backend& backend, std::size_t count)
    : backend_(backend), pointer_(backend.alloc(count)), count_(count) {}

DeviceFloats::DeviceFloats(kernels::Backend& backend, const std::vector<float>& host)
    : DeviceFloats(backend, host.size()) {
  backend_.upload(pointer_, host.data(), count_);
}

DeviceFloats::~DeviceFloats() { backend_.release(pointer_); }

std::vector<float> DeviceFloats::download() const {
  std::vector<float> host(count_);
  backend_.download(host.data(), pointer_, count_);
  backend_.synchronize();
  return host;
}

DeviceInts::DeviceInts(kernels::Backend& backend, std::size_t count)
    : backend_(backend), pointer_(backend.alloc_tokens(count)) {}

DeviceInts::DeviceInts(kernels::Backend& backend, const std::vector<int>& host)
    : DeviceInts(backend, host.size()) {
  backend_.upload_tokens(pointer_, host.data(), host.size());
}

DeviceInts::~DeviceInts() { backend_.release(pointer_); }

}  // namespace geotrain::test
