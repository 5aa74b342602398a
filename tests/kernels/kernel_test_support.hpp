// Shared by every kernel test (the golden tests here, the CUDA-vs-CPU parity
// suite in tests/gpu): one error measure, one device-buffer wrapper, the
// tolerances, and the rule for tests that only a real GPU can answer.
#pragma once
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "geotrain/kernels/backend.hpp"

namespace geotrain::test {

// Element by element: |got - want| <= abs + rel * |want| + of_largest * max|want|.
// The last term is for comparisons of two summation orders, where entries
// that cancel towards 0 carry an error proportional to the tensor's scale,
// not to their own value. Both NaN agree; NaN on one side never does.
struct Tolerance {
  double rel = 0.0;
  double abs = 0.0;
  double of_largest = 0.0;
};
inline constexpr Tolerance kExact{};
constexpr Tolerance RelativeToLargest(double fraction) { return Tolerance{0.0, 0.0, fraction}; }

// Golden tolerances, fp32. The golden values are float64 results rounded once to float32, so
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

// Worst element, count of elements out of tolerance and the first few of
// them in the failure message. Passing comparisons print their margin
// ("<label> <what> max|got-want|/max|want| = ...") when KERNELS_VERBOSE is
// set or the suite asked for it with PrintMargins (the GPU log keeps them).
::testing::AssertionResult AllClose(const std::string& what, const std::vector<float>& got,
                                    const std::vector<float>& want, Tolerance tolerance);
void PrintMargins(const std::string& label);

// count quiet NaNs.
std::vector<float> NaNs(std::size_t count);
std::vector<float> Scaled(std::vector<float> values, float factor);
float Mean(const std::vector<float>& values);

// A buffer of a backend (float, int for tokens, std::uint16_t for bf16
// storage), released on scope exit.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer(kernels::Backend& backend, std::size_t count);  // zeroed
  DeviceBuffer(kernels::Backend& backend, const std::vector<T>& host);
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  T* get() const { return pointer_; }
  std::size_t size() const { return count_; }
  std::vector<T> download() const;

 private:
  kernels::Backend& backend_;
  T* pointer_;
  std::size_t count_;
};
using DeviceFloats = DeviceBuffer<float>;
using DeviceInts = DeviceBuffer<int>;
using DeviceBf16 = DeviceBuffer<std::uint16_t>;

// One tensor held by two backends (the CPU twin and CUDA) with the same contents.
template <class T>
class Twin {
 public:
  Twin(kernels::Backend& cpu, kernels::Backend& gpu, const std::vector<T>& host) : cpu_(cpu, host), gpu_(gpu, host) {}
  Twin(kernels::Backend& cpu, kernels::Backend& gpu, std::size_t count) : cpu_(cpu, count), gpu_(gpu, count) {}
  T* c() const { return cpu_.get(); }
  T* g() const { return gpu_.get(); }
  std::size_t size() const { return cpu_.size(); }
  std::vector<T> on_cpu() const { return cpu_.download(); }
  std::vector<T> on_gpu() const { return gpu_.download(); }
  ::testing::AssertionResult agree(const std::string& what, Tolerance tolerance) const {
    return AllClose(what, on_gpu(), on_cpu(), tolerance);
  }

 private:
  DeviceBuffer<T> cpu_, gpu_;
};

// Tests that only a real GPU can answer (timing, cuBLAS's own numerics,
// sizes that take minutes when every CUDA thread is a fiber) skip themselves
// in the cuda-emu builds with this message; with the cuda preset they run.
#ifdef GEOTRAIN_CUDA_EMULATED
inline constexpr bool kCudaIsEmulated = true;
#else
inline constexpr bool kCudaIsEmulated = false;
#endif
std::string NeedsRealGpu(const std::string& why);

}  // namespace geotrain::test
