// CPU backend only: results that must not depend on the OpenMP thread count,
// the argument checks of the CPU twins, and what description() reports.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/kernels/backend.hpp"
#include "kernel_test_support.hpp"

namespace geotrain::test {
namespace {

std::vector<float> Random(std::size_t n, unsigned seed) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n);
  for (float& v : values) v = normal(engine);
  return values;
}

// Sets the OpenMP thread count for one scope.
class ThreadCount {
 public:
  explicit ThreadCount(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;
  ~ThreadCount() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

// Every gradient that sums over rows, and the gradient norm, on sizes large
// enough that the loops really run in parallel.
std::vector<std::vector<float>> RowSums(kernels::Backend& k, double* sum_of_squares) {
  constexpr int B = 4, T = 64, C = 192, NH = 4, V = 300;
  constexpr int N = B * T;
  std::vector<int> token_ids(N);
  for (int i = 0; i < N; ++i) token_ids[i] = (i * 7) % 50;  // many repeats
  DeviceInts tokens(k, token_ids);
  DeviceFloats dout(k, Random(N * C, 1)), inp(k, Random(N * C, 2)), weight(k, Random(C, 3));
  DeviceFloats mean(k, N), rstd(k, N), ln_out(k, N * C), qkv(k, Random(N * 3 * C, 4));
  DeviceFloats dwte(k, V * C), dwpe(k, T * C), dinp(k, N * C), dweight(k, C), dbias(k, C);
  DeviceFloats lse(k, B * NH * T), att_out(k, N * C), dqkv(k, N * 3 * C), scratch(k, B * NH * T);
  DeviceFloats big(k, Random(300000, 5));

  k.embedding_backward(dwte.get(), dwpe.get(), dout.get(), tokens.get(), B, T, C);
  k.layernorm_forward(ln_out.get(), mean.get(), rstd.get(), inp.get(), weight.get(), dbias.get(), N, C);
  k.layernorm_backward(dinp.get(), dweight.get(), dbias.get(), dout.get(), inp.get(), weight.get(), mean.get(),
                       rstd.get(), N, C);
  k.attention_forward(att_out.get(), lse.get(), qkv.get(), B, T, C, NH);
  k.attention_backward(dqkv.get(), scratch.get(), dout.get(), qkv.get(), att_out.get(), lse.get(), B, T, C, NH);
  // The fused ops: a residual normalised in its add, and fc's dgelu with its
  // bias sums over two 128-row chunks (the GEMMs are OpenBLAS's, not compared).
  DeviceFloats residual(k, N * C), fused_out(k, N * C);
  DeviceFloats fc_weight(k, Random(4 * C * C, 6)), fc_bias(k, Random(4 * C, 7));
  DeviceFloats pre(k, N * 4 * C), gelu(k, N * 4 * C), dgelu(k, Random(N * 4 * C, 8)), dpre(k, N * 4 * C);
  DeviceFloats fc_dinp(k, N * C), fc_dweight(k, 4 * C * C), fc_dbias(k, 4 * C);
  k.residual_layernorm_forward(residual.get(), fused_out.get(), mean.get(), rstd.get(), inp.get(), dout.get(),
                               weight.get(), dbias.get(), N, C);
  k.matmul_gelu_forward(gelu.get(), pre.get(), fused_out.get(), fc_weight.get(), fc_bias.get(), N, C, 4 * C);
  k.matmul_gelu_backward(fc_dinp.get(), fc_dweight.get(), fc_dbias.get(), dpre.get(), dgelu.get(), pre.get(),
                         fused_out.get(), fc_weight.get(), N, C, 4 * C);
  *sum_of_squares = k.sum_of_squares(big.get(), 300000);
  return {dwte.download(), dwpe.download(), dinp.download(), dweight.download(), dbias.download(),
          att_out.download(), lse.download(), dqkv.download(), residual.download(), fused_out.download(),
          mean.download(), rstd.download(), dpre.download(), fc_dbias.download()};
}

TEST(CpuBackend, ResultsDoNotDependOnTheThreadCount) {
  const auto k = kernels::make_cpu_backend();
  double one_thread_norm = 0, three_threads_norm = 0;
  std::vector<std::vector<float>> one_thread, three_threads;
  {
    ThreadCount threads(1);
    one_thread = RowSums(*k, &one_thread_norm);
  }
  {
    ThreadCount threads(3);
    three_threads = RowSums(*k, &three_threads_norm);
  }
  ASSERT_EQ(one_thread.size(), three_threads.size());
  for (std::size_t i = 0; i < one_thread.size(); ++i) EXPECT_EQ(one_thread[i], three_threads[i]) << "output " << i;
  EXPECT_EQ(one_thread_norm, three_threads_norm);
}

TEST(CpuBackend, CrossEntropyRejectsATargetOutsideTheVocabulary) {
  const auto k = kernels::make_cpu_backend();
  DeviceFloats logits(*k, 2 * 5), out(*k, 2 * 5);
  DeviceInts targets(*k, std::vector<int>{1, 5});
  try {
    k->crossentropy_forward(out.get(), logits.get(), targets.get(), 2, 5);
    FAIL() << "no error for target 5 with V = 5";
  } catch (const geotrain::RunError& error) {
    EXPECT_EQ(std::string(error.what()), "crossentropy: target 5 of row 1 is outside the vocabulary [0, 5)");
  }
  EXPECT_THROW(k->crossentropy_backward(out.get(), logits.get(), targets.get(), 0.5f, 2, 5), geotrain::RunError);
}

TEST(CpuBackend, AdamwStepsCountFromOne) {
  const auto k = kernels::make_cpu_backend();
  DeviceFloats p(*k, 4), g(*k, 4), m(*k, 4), v(*k, 4);
  EXPECT_THROW(k->adamw_update(p.get(), g.get(), m.get(), v.get(), 4, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0),
               std::invalid_argument);
}

TEST(CpuBackend, DescriptionNamesTheBlasAndTheThreads) {
  const auto k = kernels::make_cpu_backend();
  const std::string text = k->description();
  EXPECT_EQ(text.rfind("CPU, ", 0), 0u) << text;
  EXPECT_NE(text.find("BLAS"), std::string::npos) << text;
  EXPECT_NE(text.find("OpenMP " + std::to_string(omp_get_max_threads()) + " threads"), std::string::npos) << text;
  k->set_matmul_precision(kernels::MatmulPrecision::bf16);
  EXPECT_NE(k->description().find("bf16"), std::string::npos) << k->description();
}

}  // namespace
}  // namespace geotrain::test
