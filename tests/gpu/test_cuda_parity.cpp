// The CUDA backend against the CPU twin, op by op, forward and backward, on
// random inputs at two kinds of shape: small odd sizes (nothing a multiple of
// 8 or 32, to reach every edge of the kernels' tiling) and GPT-like sizes.
// Gradient buffers start with random values, so "accumulates" is checked
// too. Without a usable GPU every test is skipped with the reason.
//
// Tolerances, as max|cuda - cpu| / max|cpu| over each tensor (robust where
// entries cancel to ~0; RelativeToLargest in kernels/kernel_test_support.hpp):
//   fp32                      2e-5  Both sides are fp32 with different
//                                   summation orders (cuBLAS tiles, warp
//                                   trees, FMA contraction on the GPU); sums of
//                                   up to ~1e3 terms, typical error ~1e-7.
//   bf16 matmul               1e-3  Both sides round the operands to bf16 the
//                                   same way (RNE); what remains is fp32
//                                   accumulation order and the tensor cores'
//                                   internal rounding of the running sum.
//   bf16 attention            5e-3  Both sides round q, k, v, dout, p and ds to
//                                   bf16 the same way; p and ds are computed
//                                   in fp32 first, where the two sides differ
//                                   in the last bits (expf, summation order),
//                                   so a few of them round to the neighbouring
//                                   bf16 value (2^-8 relative each); observed
//                                   under the emulation: 2e-4.
//   sum_of_squares (double)   1e-12
// Every comparison prints its measured error, so the GPU log shows the margins.
// Under the CUDA emulation (cuda-emu preset) the same tests run on the CPU,
// except those that need a real GPU, which say so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/kernels/backend.hpp"
#include "kernels/kernel_test_support.hpp"

namespace geotrain::kernels {
// Test names and messages print the precision by name.
void PrintTo(MatmulPrecision precision, std::ostream* out) {
  *out << (precision == MatmulPrecision::bf16 ? "bf16" : "fp32");
}
}  // namespace geotrain::kernels

namespace {

using geotrain::kernels::Backend;
using geotrain::kernels::DeviceKind;
using geotrain::kernels::MatmulPrecision;
using geotrain::test::AllClose;
using geotrain::test::kExact;
using geotrain::test::RelativeToLargest;
using geotrain::test::Tolerance;
using Twin = geotrain::test::Twin<float>;
using TwinInts = geotrain::test::Twin<int>;

constexpr Tolerance kFp32Tolerance = RelativeToLargest(2e-5);
constexpr Tolerance kBf16MatmulTolerance = RelativeToLargest(1e-3);
constexpr Tolerance kBf16AttentionTolerance = RelativeToLargest(5e-3);

struct Shape {
  const char* name;
  int B, T, C, NH, V, OC;
  int N() const { return B * T; }
  std::size_t NC() const { return static_cast<std::size_t>(N()) * C; }  // the activations' floats
};
// Odd: C = 72 (HS = 24), OC = 200, V = 517, T = 37. GPT-like: HS = 64.
const Shape kShapes[] = {
    {"odd", 3, 37, 72, 3, 517, 200},
    {"gpt-like", 4, 128, 256, 4, 2048, 1024},
};

std::vector<float> random_floats(std::size_t n, float low, float high, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(n);
  for (float& v : values) v = distribution(generator);
  return values;
}

std::vector<int> random_ints(std::size_t n, int high, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int> distribution(0, high - 1);
  std::vector<int> values(n);
  for (int& v : values) v = distribution(generator);
  return values;
}

std::unique_ptr<Backend> try_cuda(std::string& reason) {
  try {
    return geotrain::kernels::make_cuda_backend();
  } catch (const geotrain::RunError& error) {
    reason = error.what();
    return nullptr;
  }
}

// Ops whose CUDA kernels do not depend on the matmul precision.
class CudaParity : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    gpu_ = try_cuda(reason);
    if (!gpu_) GTEST_SKIP() << "no usable CUDA backend: " << reason;
    cpu_ = geotrain::kernels::make_cpu_backend();
    geotrain::test::PrintMargins("parity");
  }
  Backend& cpu() { return *cpu_; }
  Backend& gpu() { return *gpu_; }
  std::unique_ptr<Twin> twin(const std::vector<float>& host) { return std::make_unique<Twin>(cpu(), gpu(), host); }
  std::unique_ptr<Twin> twin(std::size_t n) { return std::make_unique<Twin>(cpu(), gpu(), n); }
  std::unique_ptr<TwinInts> ints(const std::vector<int>& host) {
    return std::make_unique<TwinInts>(cpu(), gpu(), host);
  }
  // A layernorm's weight and bias over C channels, from `seed` on.
  std::pair<std::unique_ptr<Twin>, std::unique_ptr<Twin>> layernorm_parameters(int C, unsigned seed) {
    return {twin(random_floats(C, 0.5f, 1.5f, seed)), twin(random_floats(C, -0.5f, 0.5f, seed + 1))};
  }
  // Each output agrees within the fp32 tolerance; the messages name `what`
  // (the shape and the op) and the output.
  static void expect_fp32_agree(const std::string& what,
                                std::initializer_list<std::pair<const char*, const Twin*>> outputs) {
    for (const auto& [output, values] : outputs) EXPECT_TRUE(values->agree(what + " " + output, kFp32Tolerance));
  }

  std::unique_ptr<Backend> cpu_, gpu_;
};

// matmul and attention, once per precision (set on both backends).
class CudaParityGemm : public CudaParity, public ::testing::WithParamInterface<MatmulPrecision> {
 protected:
  void SetUp() override {
    CudaParity::SetUp();
    if (IsSkipped()) return;
    cpu().set_matmul_precision(GetParam());
    gpu().set_matmul_precision(GetParam());
  }
  bool bf16() const { return GetParam() == MatmulPrecision::bf16; }
  std::string tag(const Shape& s, const std::string& what) const {
    return std::string(bf16() ? "bf16 " : "fp32 ") + s.name + " " + what;
  }
};

INSTANTIATE_TEST_SUITE_P(Precisions, CudaParityGemm, ::testing::Values(MatmulPrecision::fp32, MatmulPrecision::bf16),
                         [](const ::testing::TestParamInfo<MatmulPrecision>& info) {
                           return info.param == MatmulPrecision::bf16 ? "bf16" : "fp32";
                         });

TEST_F(CudaParity, DescriptionNamesTheGpu) {
  EXPECT_EQ(gpu().kind(), DeviceKind::cuda);
  const std::string text = gpu().description();
  std::printf("CUDA backend: %s\n", text.c_str());
  EXPECT_NE(text.find("compute capability"), std::string::npos) << text;
}

// Larger than the 16 MiB pinned staging buffer, so the upload goes in chunks;
// the host buffer is overwritten right after upload returns.
TEST_F(CudaParity, MemoryZeroedRoundTripsAndUploadsMayReuseTheHostBuffer) {
  const std::size_t n = 5'000'003;
  float* x = gpu().alloc(n);
  float* y = gpu().alloc(n);
  std::vector<float> host(n);
  gpu().download(host.data(), x, n);
  EXPECT_EQ(std::count(host.begin(), host.end(), 0.0f), static_cast<long>(n)) << "alloc is not zeroed";
  const std::vector<float> first = random_floats(n, -1, 1, 1);
  std::vector<float> buffer = first;
  gpu().upload(x, buffer.data(), n);
  std::fill(buffer.begin(), buffer.end(), 42.0f);  // reused at once
  gpu().upload(y, buffer.data(), n);
  std::vector<float> back(n);
  gpu().download(back.data(), x, n);
  EXPECT_TRUE(back == first) << "upload did not copy the host buffer before returning";
  gpu().download(back.data(), y, n);
  EXPECT_EQ(std::count(back.begin(), back.end(), 42.0f), static_cast<long>(n));
  gpu().fill_zero(x, n);
  gpu().download(back.data(), x, n);
  EXPECT_EQ(std::count(back.begin(), back.end(), 0.0f), static_cast<long>(n));
  gpu().release(x);
  gpu().release(y);
  int* tokens = gpu().alloc_tokens(7);
  gpu().release(tokens);
  gpu().synchronize();
}

TEST_F(CudaParity, Embedding) {
  for (const Shape& s : kShapes) {
    const std::string name = s.name;
    // Tokens from a tenth of the vocabulary: many repeats in the batch.
    auto tokens = ints(random_ints(static_cast<std::size_t>(s.N()), s.V / 10, 11));
    auto wte = twin(random_floats(static_cast<std::size_t>(s.V) * s.C, -1, 1, 12));
    auto wpe = twin(random_floats(static_cast<std::size_t>(s.T) * s.C, -1, 1, 13));
    auto out = twin(s.NC());
    cpu().embedding_forward(out->c(), tokens->c(), wte->c(), wpe->c(), s.B, s.T, s.C);
    gpu().embedding_forward(out->g(), tokens->g(), wte->g(), wpe->g(), s.B, s.T, s.C);
    EXPECT_TRUE(out->agree(name + " embedding out", kFp32Tolerance));

    auto dout = twin(random_floats(out->size(), -1, 1, 14));
    auto dwte = twin(random_floats(wte->size(), -1, 1, 15));
    auto dwpe = twin(random_floats(wpe->size(), -1, 1, 16));
    for (int call = 0; call < 2; ++call) {
      cpu().embedding_backward(dwte->c(), dwpe->c(), dout->c(), tokens->c(), s.B, s.T, s.C);
      gpu().embedding_backward(dwte->g(), dwpe->g(), dout->g(), tokens->g(), s.B, s.T, s.C);
    }
    expect_fp32_agree(name + " embedding", {{"dwte (2 calls)", dwte.get()}, {"dwpe (2 calls)", dwpe.get()}});
  }
}

TEST_F(CudaParity, LayerNorm) {
  for (const Shape& s : kShapes) {
    const std::string name = s.name;
    // An offset mean, as activations in a residual stream have.
    auto inp = twin(random_floats(s.NC(), 1, 4, 21));
    auto [weight, bias] = layernorm_parameters(s.C, 22);
    auto out = twin(s.NC()), mean = twin(s.N()), rstd = twin(s.N());
    cpu().layernorm_forward(out->c(), mean->c(), rstd->c(), inp->c(), weight->c(), bias->c(), s.N(), s.C);
    gpu().layernorm_forward(out->g(), mean->g(), rstd->g(), inp->g(), weight->g(), bias->g(), s.N(), s.C);
    expect_fp32_agree(name + " layernorm", {{"out", out.get()}, {"mean", mean.get()}, {"rstd", rstd.get()}});

    auto dout = twin(random_floats(s.NC(), -1, 1, 24));
    auto dinp = twin(random_floats(s.NC(), -1, 1, 25));
    auto dweight = twin(random_floats(s.C, -1, 1, 26));
    auto dbias = twin(random_floats(s.C, -1, 1, 27));
    // Both backward from the CPU's statistics, so that only the backward is compared.
    gpu().upload(mean->g(), mean->on_cpu().data(), mean->size());
    gpu().upload(rstd->g(), rstd->on_cpu().data(), rstd->size());
    cpu().layernorm_backward(dinp->c(), dweight->c(), dbias->c(), dout->c(), inp->c(), weight->c(), mean->c(),
                             rstd->c(), s.N(), s.C);
    gpu().layernorm_backward(dinp->g(), dweight->g(), dbias->g(), dout->g(), inp->g(), weight->g(), mean->g(),
                             rstd->g(), s.N(), s.C);
    expect_fp32_agree(name + " layernorm", {{"dinp", dinp.get()}, {"dweight", dweight.get()}, {"dbias", dbias.get()}});
  }
}

// The fused residual + layernorm, in place over a as the model calls it: the
// same adds and the same reduction order as the unfused pair on each side.
TEST_F(CudaParity, ResidualLayerNorm) {
  for (const Shape& s : kShapes) {
    const std::string name = s.name;
    auto a = twin(random_floats(s.NC(), 1, 4, 71));
    auto b = twin(random_floats(s.NC(), -1, 1, 72));
    auto [weight, bias] = layernorm_parameters(s.C, 73);
    auto out = twin(s.NC()), mean = twin(s.N()), rstd = twin(s.N());
    cpu().residual_layernorm_forward(a->c(), out->c(), mean->c(), rstd->c(), a->c(), b->c(), weight->c(), bias->c(),
                                     s.N(), s.C);
    gpu().residual_layernorm_forward(a->g(), out->g(), mean->g(), rstd->g(), a->g(), b->g(), weight->g(), bias->g(),
                                     s.N(), s.C);
    EXPECT_TRUE(a->agree(name + " residual_layernorm residual", kExact)) << "a + b is one rounding on both sides";
    expect_fp32_agree(name + " residual_layernorm", {{"out", out.get()}, {"mean", mean.get()}, {"rstd", rstd.get()}});
  }
}

// fc of the MLP: C -> OC with bias and GELU. Inputs reach both GELU tails.
TEST_P(CudaParityGemm, MatmulGelu) {
  const Tolerance tolerance = bf16() ? kBf16MatmulTolerance : kFp32Tolerance;
  for (const Shape& s : kShapes) {
    const std::string name = tag(s, "matmul_gelu");
    const int N = s.N();
    const std::size_t out_size = static_cast<std::size_t>(N) * s.OC;
    auto inp = twin(random_floats(static_cast<std::size_t>(N) * s.C, -1, 1, 81));
    auto weight = twin(random_floats(static_cast<std::size_t>(s.OC) * s.C, -0.3f, 0.3f, 82));
    auto bias = twin(random_floats(s.OC, -1, 1, 83));
    auto out = twin(random_floats(out_size, -9, 9, 84)), pre = twin(random_floats(out_size, -9, 9, 85));
    cpu().matmul_gelu_forward(out->c(), pre->c(), inp->c(), weight->c(), bias->c(), N, s.C, s.OC);
    gpu().matmul_gelu_forward(out->g(), pre->g(), inp->g(), weight->g(), bias->g(), N, s.C, s.OC);
    EXPECT_TRUE(pre->agree(name + " pre", tolerance));
    EXPECT_TRUE(out->agree(name + " out", tolerance));

    auto dout = twin(random_floats(out_size, -1, 1, 86));
    auto dpre = twin(random_floats(out_size, -9, 9, 87));  // overwritten
    auto dinp = twin(random_floats(inp->size(), -1, 1, 88));
    auto dweight = twin(random_floats(weight->size(), -1, 1, 89));
    auto dbias = twin(random_floats(bias->size(), -1, 1, 90));
    // Both backward from the CPU's pre-activation, so that only the backward is compared.
    gpu().upload(pre->g(), pre->on_cpu().data(), out_size);
    cpu().matmul_gelu_backward(dinp->c(), dweight->c(), dbias->c(), dpre->c(), dout->c(), pre->c(), inp->c(),
                               weight->c(), N, s.C, s.OC);
    gpu().matmul_gelu_backward(dinp->g(), dweight->g(), dbias->g(), dpre->g(), dout->g(), pre->g(), inp->g(),
                               weight->g(), N, s.C, s.OC);
    EXPECT_TRUE(dpre->agree(name + " dpre", kFp32Tolerance));
    EXPECT_TRUE(dinp->agree(name + " dinp", tolerance));
    EXPECT_TRUE(dweight->agree(name + " dweight", tolerance));
    EXPECT_TRUE(dbias->agree(name + " dbias", kFp32Tolerance));  // fp32 column sums in both modes
  }
}

TEST_P(CudaParityGemm, Matmul) {
  const Tolerance tolerance = bf16() ? kBf16MatmulTolerance : kFp32Tolerance;
  for (const Shape& s : kShapes) {
    // The shape's (C -> OC) layer and its transpose (OC -> C), as fc and proj.
    for (const auto& [in, outc] : {std::pair{s.C, s.OC}, std::pair{s.OC, s.C}}) {
      for (const bool with_bias : {true, false}) {
        const std::string name = tag(s, std::to_string(in) + "->" + std::to_string(outc) +
                                            (with_bias ? " bias" : " no-bias"));
        const int N = s.N();
        auto inp = twin(random_floats(static_cast<std::size_t>(N) * in, -1, 1, 31));
        auto weight = twin(random_floats(static_cast<std::size_t>(outc) * in, -0.1f, 0.1f, 32));
        auto bias = twin(random_floats(outc, -1, 1, 33));
        auto out = twin(random_floats(static_cast<std::size_t>(N) * outc, -9, 9, 34));  // overwritten
        cpu().matmul_forward(out->c(), inp->c(), weight->c(), with_bias ? bias->c() : nullptr, N, in, outc);
        gpu().matmul_forward(out->g(), inp->g(), weight->g(), with_bias ? bias->g() : nullptr, N, in, outc);
        EXPECT_TRUE(out->agree(name + " out", tolerance));

        auto dout = twin(random_floats(out->size(), -1, 1, 35));
        auto dinp = twin(random_floats(inp->size(), -1, 1, 36));
        auto dweight = twin(random_floats(weight->size(), -1, 1, 37));
        auto dbias = twin(random_floats(bias->size(), -1, 1, 38));
        cpu().matmul_backward(dinp->c(), dweight->c(), with_bias ? dbias->c() : nullptr, dout->c(), inp->c(),
                              weight->c(), N, in, outc);
        gpu().matmul_backward(dinp->g(), dweight->g(), with_bias ? dbias->g() : nullptr, dout->g(), inp->g(),
                              weight->g(), N, in, outc);
        EXPECT_TRUE(dinp->agree(name + " dinp", tolerance));
        EXPECT_TRUE(dweight->agree(name + " dweight", tolerance));
        EXPECT_TRUE(dbias->agree(name + " dbias", kFp32Tolerance));  // fp32 column sums in both modes
      }
    }
  }
}

// The column reductions (layernorm dweight/dbias, matmul dbias) launch one
// block row per 128-row chunk; gridDim.y is at most 65535, so more than
// 65535 * 128 rows need the kernels' chunk-striding loop. dout holds small
// integers, so every bias sum is exact in fp32 whatever the order: the two
// backends must agree bitwise.
TEST_F(CudaParity, ColumnSumsBeyondTheGridYLimit) {
  if (geotrain::test::kCudaIsEmulated) {
    GTEST_SKIP() << geotrain::test::NeedsRealGpu("8.4M rows: ~90 s with every CUDA thread a fiber");
  }
  const int N = 65535 * 128 + 300, C = 3;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  std::vector<float> integers(NC);
  std::mt19937 generator(101);
  std::uniform_int_distribution<int> distribution(-1, 1);
  for (float& value : integers) value = static_cast<float>(distribution(generator));
  auto dout = twin(integers);

  auto ones = twin(std::vector<float>(C, 1.0f));
  auto dbias = twin(static_cast<std::size_t>(C));
  auto dinp = twin(static_cast<std::size_t>(N));
  auto dweight = twin(static_cast<std::size_t>(C));
  auto inp = twin(random_floats(N, -1, 1, 102));
  // matmul with C = 1 input channel, OC = 3 outputs: dbias = column sums of dout.
  cpu().matmul_backward(dinp->c(), dweight->c(), dbias->c(), dout->c(), inp->c(), ones->c(), N, 1, C);
  gpu().matmul_backward(dinp->g(), dweight->g(), dbias->g(), dout->g(), inp->g(), ones->g(), N, 1, C);
  EXPECT_TRUE(dbias->agree("matmul dbias, N = 65535*128+300", kExact));
  EXPECT_TRUE(dinp->agree("matmul dinp, N = 65535*128+300", kFp32Tolerance));
  // matmul_gelu's own partials kernel at pre = 0, where gelu' = 1/2 exactly:
  // half-integer sums, exact in any order.
  auto pre = twin(NC), dpre = twin(NC), gelu_dbias = twin(static_cast<std::size_t>(C));
  cpu().matmul_gelu_backward(dinp->c(), dweight->c(), gelu_dbias->c(), dpre->c(), dout->c(), pre->c(), inp->c(),
                             ones->c(), N, 1, C);
  gpu().matmul_gelu_backward(dinp->g(), dweight->g(), gelu_dbias->g(), dpre->g(), dout->g(), pre->g(), inp->g(),
                             ones->g(), N, 1, C);
  EXPECT_TRUE(gelu_dbias->agree("matmul_gelu dbias, N = 65535*128+300", kExact));

  auto x = twin(random_floats(NC, -1, 1, 103));
  auto weight = twin(std::vector<float>(C, 1.0f));
  auto bias = twin(std::vector<float>(C, 0.0f));
  auto out = twin(NC), mean = twin(static_cast<std::size_t>(N)), rstd = twin(static_cast<std::size_t>(N));
  cpu().layernorm_forward(out->c(), mean->c(), rstd->c(), x->c(), weight->c(), bias->c(), N, C);
  gpu().upload(mean->g(), mean->on_cpu().data(), mean->size());
  gpu().upload(rstd->g(), rstd->on_cpu().data(), rstd->size());
  auto ln_dinp = twin(NC);
  auto ln_dweight = twin(static_cast<std::size_t>(C)), ln_dbias = twin(static_cast<std::size_t>(C));
  cpu().layernorm_backward(ln_dinp->c(), ln_dweight->c(), ln_dbias->c(), dout->c(), x->c(), weight->c(), mean->c(),
                           rstd->c(), N, C);
  gpu().layernorm_backward(ln_dinp->g(), ln_dweight->g(), ln_dbias->g(), dout->g(), x->g(), weight->g(), mean->g(),
                           rstd->g(), N, C);
  EXPECT_TRUE(ln_dbias->agree("layernorm dbias, N = 65535*128+300", kExact));
  EXPECT_TRUE(ln_dinp->agree("layernorm dinp, N = 65535*128+300", kFp32Tolerance));
}

TEST_P(CudaParityGemm, Attention) {
  const Tolerance tolerance = bf16() ? kBf16AttentionTolerance : kFp32Tolerance;
  // Beside the op shapes: the largest head the kernels hold (128 channels)
  // on a sequence that ends inside a tile.
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({"head-128", 2, 77, 256, 2, 17, 20});
  for (const Shape& s : shapes) {
    const std::size_t lse_size = static_cast<std::size_t>(s.B) * s.NH * s.T;
    auto qkv = twin(random_floats(3 * s.NC(), -2, 2, 41));
    auto out = twin(s.NC()), lse = twin(lse_size);
    cpu().attention_forward(out->c(), lse->c(), qkv->c(), s.B, s.T, s.C, s.NH);
    gpu().attention_forward(out->g(), lse->g(), qkv->g(), s.B, s.T, s.C, s.NH);
    EXPECT_TRUE(out->agree(tag(s, "attention out"), tolerance));
    EXPECT_TRUE(lse->agree(tag(s, "attention lse"), tolerance));

    auto dout = twin(random_floats(s.NC(), -1, 1, 42));
    auto dqkv = twin(random_floats(3 * s.NC(), -1, 1, 43));
    auto scratch = twin(lse_size);
    // Both backward from the CPU's forward, so that only the backward is compared.
    gpu().upload(out->g(), out->on_cpu().data(), s.NC());
    gpu().upload(lse->g(), lse->on_cpu().data(), lse_size);
    cpu().attention_backward(dqkv->c(), scratch->c(), dout->c(), qkv->c(), out->c(), lse->c(), s.B, s.T, s.C, s.NH);
    gpu().attention_backward(dqkv->g(), scratch->g(), dout->g(), qkv->g(), out->g(), lse->g(), s.B, s.T, s.C, s.NH);
    EXPECT_TRUE(dqkv->agree(tag(s, "attention dqkv"), tolerance));
  }
}

TEST_F(CudaParity, Gelu) {
  const std::size_t n = 1'000'003;
  auto inp = twin(random_floats(n, -6, 6, 51));
  auto out = twin(n);
  cpu().gelu_forward(out->c(), inp->c(), n);
  gpu().gelu_forward(out->g(), inp->g(), n);
  EXPECT_TRUE(out->agree("gelu out", kFp32Tolerance));
  auto dout = twin(random_floats(n, -1, 1, 52));
  auto dinp = twin(random_floats(n, -1, 1, 53));
  cpu().gelu_backward(dinp->c(), inp->c(), dout->c(), n);
  gpu().gelu_backward(dinp->g(), inp->g(), dout->g(), n);
  EXPECT_TRUE(dinp->agree("gelu dinp", kFp32Tolerance));
}

TEST_F(CudaParity, ResidualAccumulateScaleSumOfSquares) {
  const std::size_t n = 3'000'017;
  auto a = twin(random_floats(n, -1, 1, 61));
  auto b = twin(random_floats(n, -1, 1, 62));
  auto out = twin(n);
  cpu().residual_forward(out->c(), a->c(), b->c(), n);
  gpu().residual_forward(out->g(), a->g(), b->g(), n);
  EXPECT_TRUE(out->agree("residual out", kExact)) << "a + b is one rounding on both sides";
  cpu().accumulate(out->c(), a->c(), n);
  gpu().accumulate(out->g(), a->g(), n);
  EXPECT_TRUE(out->agree("accumulate", kExact));
  cpu().scale(out->c(), 0.37f, n);
  gpu().scale(out->g(), 0.37f, n);
  EXPECT_TRUE(out->agree("scale", kExact));
  for (const std::size_t count : {std::size_t{1}, std::size_t{1000}, n}) {
    const double on_cpu = cpu().sum_of_squares(out->c(), count);
    const double on_gpu = gpu().sum_of_squares(out->g(), count);
    const double relative = std::fabs(on_gpu - on_cpu) / on_cpu;
    std::printf("parity sum_of_squares n=%-9zu relative difference %.3e (tolerance 1e-12)\n", count, relative);
    EXPECT_LE(relative, 1e-12) << "n = " << count << ": cuda " << on_gpu << ", cpu " << on_cpu;
  }
}

// Bitwise: rounding to nearest even has one answer. Values spread over many
// binades, ties to even included (every 2^-8 step of [1, 2) is one).
TEST_F(CudaParity, Bf16Storage) {
  const std::size_t n = 1'000'003;
  std::vector<float> values = random_floats(n, -1, 1, 71);
  for (std::size_t i = 0; i < n; i += 3) values[i] *= std::ldexp(1.0f, static_cast<int>(i % 200) - 100);
  for (std::size_t i = 1; i < n; i += 7) values[i] = 1.0f + std::ldexp(static_cast<float>(i % 256), -8);
  auto in = twin(values), out = twin(n);
  geotrain::test::DeviceBf16 on_cpu(cpu(), n), on_gpu(gpu(), n);
  cpu().to_bf16(on_cpu.get(), in->c(), n);
  gpu().to_bf16(on_gpu.get(), in->g(), n);
  cpu().from_bf16(out->c(), on_cpu.get(), n);
  gpu().from_bf16(out->g(), on_gpu.get(), n);
  EXPECT_TRUE(out->agree("bf16 storage round trip", kExact));
}

// The cross-entropy tests' rows of logits: GPT-2's vocabulary with large
// logits (stability), and a small odd one.
struct VocabularyCase {
  const char* name;
  int N, V;
  float logit_range;
};
constexpr VocabularyCase kVocabularyCases[] = {{"V=50257", 64, 50257, 30.0f}, {"V=517", 111, 517, 3.0f}};

TEST_F(CudaParity, CrossEntropy) {
  for (const VocabularyCase& k : kVocabularyCases) {
    const std::string name = k.name;
    auto logits = twin(random_floats(static_cast<std::size_t>(k.N) * k.V, -k.logit_range, k.logit_range, 71));
    auto targets = ints(random_ints(k.N, k.V, 72));
    auto losses = twin(k.N);
    cpu().crossentropy_forward(losses->c(), logits->c(), targets->c(), k.N, k.V);
    gpu().crossentropy_forward(losses->g(), logits->g(), targets->g(), k.N, k.V);
    EXPECT_TRUE(losses->agree(name + " crossentropy losses", kFp32Tolerance));
    const float dloss = 1.0f / static_cast<float>(k.N);
    auto dlogits = twin(random_floats(logits->size(), -9, 9, 73));  // overwritten
    cpu().crossentropy_backward(dlogits->c(), logits->c(), targets->c(), dloss, k.N, k.V);
    gpu().crossentropy_backward(dlogits->g(), logits->g(), targets->g(), dloss, k.N, k.V);
    EXPECT_TRUE(dlogits->agree(name + " crossentropy dlogits", kFp32Tolerance));
  }
}

TEST_F(CudaParity, CrossEntropyRejectsATargetOutsideTheVocabulary) {
  auto logits = twin(random_floats(4 * 10, -1, 1, 74));
  auto targets = ints({1, 2, 10, 3});
  auto losses = twin(4);
  try {
    gpu().crossentropy_forward(losses->g(), logits->g(), targets->g(), 4, 10);
    FAIL() << "no error for target 10 with V = 10";
  } catch (const geotrain::RunError& error) {
    EXPECT_NE(std::string(error.what()).find("row 2"), std::string::npos) << error.what();
  }
  gpu().synchronize();  // the backend stays usable
}

// Vocabulary-parallel embedding: each shard's forward (with and without
// wpe) and backward (accumulating, twice) on its own rows, tokens spread
// over the whole vocabulary so that every shard has tokens inside and outside.
TEST_F(CudaParity, EmbeddingShards) {
  for (const Shape& s : kShapes) {
    const std::string name = s.name;
    auto tokens = ints(random_ints(static_cast<std::size_t>(s.N()), s.V, 17));
    auto wpe = twin(random_floats(static_cast<std::size_t>(s.T) * s.C, -1, 1, 18));
    auto dout = twin(random_floats(s.NC(), -1, 1, 19));
    // Three uneven shards; the last adds the positions.
    const int bounds[] = {0, s.V / 5, s.V / 5 + s.V / 2, s.V};
    for (int shard = 0; shard < 3; ++shard) {
      const int begin = bounds[shard], rows = bounds[shard + 1] - bounds[shard];
      const bool positions = shard == 2;
      const std::string tag = name + " shard " + std::to_string(shard) + " embedding";
      auto wte_rows = twin(random_floats(static_cast<std::size_t>(rows) * s.C, -1, 1, 20 + shard));
      auto out = twin(random_floats(s.NC(), -9, 9, 23));  // overwritten
      cpu().embedding_shard_forward(out->c(), tokens->c(), wte_rows->c(), positions ? wpe->c() : nullptr, s.B, s.T,
                                    s.C, begin, rows);
      gpu().embedding_shard_forward(out->g(), tokens->g(), wte_rows->g(), positions ? wpe->g() : nullptr, s.B, s.T,
                                    s.C, begin, rows);
      EXPECT_TRUE(out->agree(tag + " out", kExact));
      auto dwte_rows = twin(random_floats(wte_rows->size(), -1, 1, 24 + shard));
      auto dwpe = twin(random_floats(wpe->size(), -1, 1, 27));
      for (int call = 0; call < 2; ++call) {
        cpu().embedding_shard_backward(dwte_rows->c(), positions ? dwpe->c() : nullptr, dout->c(), tokens->c(), s.B,
                                       s.T, s.C, begin, rows);
        gpu().embedding_shard_backward(dwte_rows->g(), positions ? dwpe->g() : nullptr, dout->g(), tokens->g(), s.B,
                                       s.T, s.C, begin, rows);
      }
      EXPECT_TRUE(dwte_rows->agree(tag + " dwte_rows (2 calls)", kFp32Tolerance));
      EXPECT_TRUE(dwpe->agree(tag + " dwpe (2 calls" + (positions ? ")" : ", null: unchanged)"), kFp32Tolerance));
    }
  }
}

// Vocabulary-parallel cross-entropy: the three passes shard by shard, the
// group's MAX and SUM taken here from the CPU's results and given to both.
// The maxima are exact; the sums are fp32 block trees on the GPU, double on
// the CPU.
TEST_F(CudaParity, CrossEntropyShards) {
  for (const VocabularyCase& k : kVocabularyCases) {
    const std::string name = k.name;
    const std::vector<float> logits = random_floats(static_cast<std::size_t>(k.N) * k.V, -k.logit_range,
                                                    k.logit_range, 75);
    auto targets = ints(random_ints(k.N, k.V, 76));
    const int bounds[] = {0, k.V / 3, k.V / 3 + 1, k.V};  // one shard of one column
    std::vector<std::unique_ptr<Twin>> shard_logits;
    std::vector<float> row_max(k.N, -INFINITY), stats(2 * static_cast<std::size_t>(k.N), 0.0f);
    for (int shard = 0; shard < 3; ++shard) {
      const int begin = bounds[shard], width = bounds[shard + 1] - bounds[shard];
      std::vector<float> columns;
      for (int n = 0; n < k.N; ++n) {
        const auto first = logits.begin() + static_cast<std::ptrdiff_t>(n) * k.V + begin;
        columns.insert(columns.end(), first, first + width);
      }
      shard_logits.push_back(twin(columns));
      auto shard_max = twin(random_floats(k.N, -9, 9, 77));  // overwritten
      cpu().crossentropy_shard_max(shard_max->c(), shard_logits.back()->c(), k.N, width);
      gpu().crossentropy_shard_max(shard_max->g(), shard_logits.back()->g(), k.N, width);
      EXPECT_TRUE(shard_max->agree(name + " shard " + std::to_string(shard) + " row_max", kExact));
      const std::vector<float> host = shard_max->on_cpu();
      for (int n = 0; n < k.N; ++n) row_max[n] = std::max(row_max[n], host[n]);
    }
    auto group_max = twin(row_max);
    for (int shard = 0; shard < 3; ++shard) {
      const int begin = bounds[shard], width = bounds[shard + 1] - bounds[shard];
      auto shard_stats = twin(random_floats(stats.size(), -9, 9, 78));  // overwritten
      cpu().crossentropy_shard_statistics(shard_stats->c(), shard_logits[shard]->c(), targets->c(), group_max->c(),
                                          k.N, width, begin);
      gpu().crossentropy_shard_statistics(shard_stats->g(), shard_logits[shard]->g(), targets->g(), group_max->g(),
                                          k.N, width, begin);
      EXPECT_TRUE(shard_stats->agree(name + " shard " + std::to_string(shard) + " stats", kFp32Tolerance));
      const std::vector<float> host = shard_stats->on_cpu();
      for (std::size_t i = 0; i < stats.size(); ++i) stats[i] += host[i];
    }
    auto group_stats = twin(stats);
    const float dloss = 1.0f / static_cast<float>(k.N);
    for (int shard = 0; shard < 3; ++shard) {
      const int begin = bounds[shard];
      const int width = bounds[shard + 1] - bounds[shard];
      auto dlogits = twin(random_floats(shard_logits[shard]->size(), -9, 9, 79));  // overwritten
      cpu().crossentropy_shard_backward(dlogits->c(), shard_logits[shard]->c(), targets->c(), group_max->c(),
                                        group_stats->c(), dloss, k.N, width, begin);
      gpu().crossentropy_shard_backward(dlogits->g(), shard_logits[shard]->g(), targets->g(), group_max->g(),
                                        group_stats->g(), dloss, k.N, width, begin);
      EXPECT_TRUE(dlogits->agree(name + " shard " + std::to_string(shard) + " dlogits", kFp32Tolerance));
    }
  }
}

TEST_F(CudaParity, AdamW) {
  const std::size_t n = 100'003;
  auto params = twin(random_floats(n, -1, 1, 81));
  auto m = twin(n), v = twin(n);
  for (int step = 1; step <= 3; ++step) {
    auto grads = twin(random_floats(n, -1, 1, 81 + static_cast<unsigned>(step)));
    cpu().adamw_update(params->c(), grads->c(), m->c(), v->c(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    gpu().adamw_update(params->g(), grads->g(), m->g(), v->g(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    const std::string s = " after step " + std::to_string(step);
    EXPECT_TRUE(m->agree("adamw m" + s, kFp32Tolerance));
    EXPECT_TRUE(v->agree("adamw v" + s, kFp32Tolerance));
    EXPECT_TRUE(params->agree("adamw params" + s, kFp32Tolerance));
  }
  EXPECT_THROW(gpu().adamw_update(params->g(), params->g(), m->g(), v->g(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0),
               std::invalid_argument);
}

// The reductions have a fixed order: the same inputs give the same bits.
TEST_P(CudaParityGemm, BackwardIsBitwiseReproducible) {
  const Shape& s = kShapes[1];
  const int N = s.N();
  Backend& k = gpu();
  auto run = [&] {
    std::vector<std::vector<float>> results;
    auto keep = [&](float* p, std::size_t n) {
      std::vector<float> host(n);
      k.download(host.data(), p, n);
      results.push_back(std::move(host));
      k.release(p);
    };
    auto upload = [&](const std::vector<float>& host) {
      float* p = k.alloc(host.size());
      k.upload(p, host.data(), host.size());
      return p;
    };
    float* inp = upload(random_floats(s.NC(), -1, 1, 91));
    float* dout = upload(random_floats(s.NC(), -1, 1, 92));
    float* weight = upload(random_floats(static_cast<std::size_t>(s.C) * s.C, -0.1f, 0.1f, 93));
    float* mean = k.alloc(N);
    float* rstd = k.alloc(N);
    float* ln = k.alloc(s.NC());
    k.layernorm_forward(ln, mean, rstd, inp, weight, weight, N, s.C);
    float* dinp = k.alloc(s.NC());
    float* dw = k.alloc(s.C);
    float* db = k.alloc(s.C);
    k.layernorm_backward(dinp, dw, db, dout, inp, weight, mean, rstd, N, s.C);
    float* dmat = k.alloc(s.NC());
    float* dweight = k.alloc(static_cast<std::size_t>(s.C) * s.C);
    float* dbias = k.alloc(s.C);
    k.matmul_backward(dmat, dweight, dbias, dout, inp, weight, N, s.C, s.C);
    int* tokens = k.alloc_tokens(N);
    const std::vector<int> host_tokens = random_ints(N, 7, 94);
    k.upload_tokens(tokens, host_tokens.data(), N);
    float* dwte = k.alloc(static_cast<std::size_t>(7) * s.C);
    float* dwpe = k.alloc(static_cast<std::size_t>(s.T) * s.C);
    k.embedding_backward(dwte, dwpe, dout, tokens, s.B, s.T, s.C);
    float* qkv = upload(random_floats(3 * s.NC(), -2, 2, 95));
    const std::size_t lse_size = static_cast<std::size_t>(s.B) * s.NH * s.T;
    float* lse = k.alloc(lse_size);
    float* y = k.alloc(s.NC());
    k.attention_forward(y, lse, qkv, s.B, s.T, s.C, s.NH);
    float* dqkv = k.alloc(3 * s.NC());
    float* scratch = k.alloc(lse_size);
    k.attention_backward(dqkv, scratch, dout, qkv, y, lse, s.B, s.T, s.C, s.NH);
    results.push_back({static_cast<float>(k.sum_of_squares(dqkv, 3 * s.NC()))});
    keep(dinp, s.NC());
    keep(dw, s.C);
    keep(db, s.C);
    keep(dmat, s.NC());
    keep(dweight, static_cast<std::size_t>(s.C) * s.C);
    keep(dbias, s.C);
    keep(dwte, static_cast<std::size_t>(7) * s.C);
    keep(dwpe, static_cast<std::size_t>(s.T) * s.C);
    keep(dqkv, 3 * s.NC());
    for (float* p : {inp, dout, weight, mean, rstd, ln, qkv, lse, y, scratch}) k.release(p);
    k.release(tokens);
    return results;
  };
  const auto first = run();
  const auto second = run();
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(first[i] == second[i]) << "result " << i << " differs";
}

}  // namespace
