// Shared by the kernel tests: device buffers that free themselves, the
// comparison against golden tensors, and the tolerances - stated once, here.
#pragma once
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "geotrain/kernels/backend.hpp"

namespace geotrain::test {

// |got - want| <= abs + rel * |want|, element by element.
struct Tolerance {
  double rel;
  double abs;
};

// fp32. The golden values are float64 results rounded once to float32, so
// the reference carries at most 2^-24 ~ 6e-8 relative error. The kernels sum
// up to ~40 float terms (C = 12, OC = 20, V = 17, T = 5); the rounding error
// of such a sum is bounded by about K * 2^-24 ~ 2.4e-6 of the sum of |terms|,
// typically sqrt(K) * 2^-24 ~ 4e-7. rel 1e-5 is 4x the worst case and ~25x
// the typical one, and still fails on any formula error (a wrong eps, scale
// or missing term moves results by >= 1e-3 relative). abs 1e-6 covers
// entries that cancel towards 0 (a layernorm input gradient, a bias sum),
// whose relative error is meaningless: 2.4e-6 of the O(0.1-1) terms they
// are made of. Observed on the CPU backend: at most 0.35 of the allowed error
// (matmul dweight), see KERNELS_VERBOSE=1.
inline constexpr Tolerance kFp32{1e-5, 1e-6};

// bf16 GEMM operands against the fp32 reference. An operand rounded to bf16
// (8 significant bits) is off by up to 2^-9 relative, a product of two by up
// to ~2^-8 ~ 4e-3. A K-term sum of such products (K <= 20 here, unit-variance
// operands: |terms| up to ~3) has an error of ~4e-3 * sqrt(K) * rms|term| ~
// 2e-2 whatever its value - so the bound is mostly absolute: abs 5e-2, rel
// 1e-2. Observed on the CPU: at most 0.29 of the allowed error (matmul
// dweight). Wrong transposes or a dropped term still miss it by 10-100x. The
// exactness of the rounding itself is tested at the fp32 tolerance, against
// references computed from the bf16-rounded operands (make_golden.py).
inline constexpr Tolerance kBf16{1e-2, 5e-2};

// Worst element, count of elements out of tolerance, and the first few of
// them, in the failure message. With KERNELS_VERBOSE set, also prints the
// worst relative error of every comparison that passes.
::testing::AssertionResult AllClose(const std::string& what, const std::vector<float>& got,
                                    const std::vector<float>& want, Tolerance tolerance);

// count quiet NaNs.
std::vector<float> NaNs(std::size_t count);
std::vector<float> Scaled(std::vector<float> values, float factor);
float Mean(const std::vector<float>& values);

// A float buffer of a backend, released on scope exit.
class DeviceFloats {
 public:
  DeviceFloats(kernels::Backend& backend, std::size_t count);
  DeviceFloats(kernels::Backend& backend, const std::vector<float>& host);
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  ~DeviceFloats();
  float* get() const { return pointer_; }
  std::vector<float> download() const;

 private:
  kernels::Backend& backend_;
  float* pointer_;
  std::size_t count_;
};

// A token (int) buffer of a backend, released on scope exit.
class DeviceInts {
 public:
  DeviceInts(kernels::Backend& backend, std::size_t count);
  DeviceInts(kernels::Backend& backend, const std::vector<int>& host);
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;
  ~DeviceInts();
  int* get() const { return pointer_; }

 private:
  kernels::Backend& backend_;
  int* pointer_;
};

}  // namespace geotrain::test
