// Every op of every backend, forward and backward, against golden tensors
// computed by PyTorch (tests/golden/make_golden.py). One test body runs on
// each backend: the CPU always, CUDA where make_backend("cuda") succeeds
// (elsewhere those tests are skipped with the reason).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/kernels/backend.hpp"
#include "golden_file.hpp"
#include "kernel_test_support.hpp"

namespace geotrain::test {
namespace {

using kernels::Backend;
using kernels::MatmulPrecision;

// The shapes make_golden.py uses (it writes them into the tensors' shapes
// too; these are checked against the files below).
constexpr int B = 2, T = 5, C = 12, NH = 3, V = 17, OC = 20;
constexpr int N = B * T;

class Ops : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    try {
      DeviceRequest device = DeviceRequest::cpu;
      if (!parse_device_request(GetParam(), &device)) FAIL() << "unknown backend " << GetParam();
      backend_ = kernels::make_backend(device);
    } catch (const geotrain::RunError& error) {
      GTEST_SKIP() << "backend '" << GetParam() << "' not usable here: " << error.what();
    }
  }

  Backend& k() { return *backend_; }
  DeviceFloats upload(const std::vector<float>& host) { return DeviceFloats(k(), host); }
  DeviceFloats zeros(std::size_t count) { return DeviceFloats(k(), count); }
  // Outputs that an op overwrites (forward outputs, dlogits, scratch) start
  // as NaN: an op that reads them, or skips an element, fails the test.
  DeviceFloats garbage(std::size_t count) { return DeviceFloats(k(), NaNs(count)); }
  DeviceInts upload(const std::vector<int>& host) { return DeviceInts(k(), host); }
  // Each output matches the golden tensor of its name (fp32); after `calls`
  // calls of an op that adds into zeros, `calls` times it.
  static void expect_golden(const GoldenCase& g, std::initializer_list<std::pair<const char*, const DeviceFloats*>> outputs,
                            int calls = 1) {
    for (const auto& [name, output] : outputs) {
      const std::string what = calls == 1 ? name : name + (" after " + std::to_string(calls) + " calls");
      EXPECT_TRUE(AllClose(what, output->download(), Scaled(g.floats(name), static_cast<float>(calls)), kFp32));
    }
  }

  std::unique_ptr<Backend> backend_;
};

INSTANTIATE_TEST_SUITE_P(Backends, Ops, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(GoldenFiles, ShapesAreTheOnesTheTestsAssume) {
  const auto attention = GoldenCase::load("attention");
  EXPECT_EQ(attention.shape("lse"), (std::vector<std::size_t>{B, NH, T}));
  EXPECT_EQ(attention.shape("qkv"), (std::vector<std::size_t>{B, T, 3 * C}));
  EXPECT_EQ(GoldenCase::load("matmul").shape("weight"), (std::vector<std::size_t>{OC, C}));
  EXPECT_EQ(GoldenCase::load("crossentropy").shape("logits"), (std::vector<std::size_t>{B, T, V}));
  EXPECT_EQ(GoldenCase::load("embedding").ints("tokens").size(), static_cast<std::size_t>(N));
}

TEST(GoldenFiles, AMissingCaseOrTensorIsAnErrorThatSaysWhere) {
  try {
    GoldenCase::load("no_such_case");
    FAIL() << "loaded a case that does not exist";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("no_such_case.bin: cannot open"), std::string::npos) << error.what();
  }
  const auto gelu = GoldenCase::load("gelu");
  EXPECT_THROW(gelu.floats("no_such_tensor"), std::runtime_error);
  EXPECT_THROW(gelu.ints("inp"), std::runtime_error);  // float32, not int32
}

// ---- embedding

TEST_P(Ops, EmbeddingForward) {
  const auto g = GoldenCase::load("embedding");
  auto tokens = upload(g.ints("tokens"));
  auto wte = upload(g.floats("wte")), wpe = upload(g.floats("wpe"));
  auto out = garbage(N * C);
  k().embedding_forward(out.get(), tokens.get(), wte.get(), wpe.get(), B, T, C);
  EXPECT_TRUE(AllClose("out", out.download(), g.floats("out"), kFp32));
}

// Repeated tokens add into the same dwte row; a second call adds again.
TEST_P(Ops, EmbeddingBackwardAccumulates) {
  const auto g = GoldenCase::load("embedding");
  auto tokens = upload(g.ints("tokens"));
  auto dout = upload(g.floats("dout"));
  auto dwte = zeros(g.floats("dwte").size()), dwpe = zeros(g.floats("dwpe").size());
  k().embedding_backward(dwte.get(), dwpe.get(), dout.get(), tokens.get(), B, T, C);
  EXPECT_TRUE(AllClose("dwte", dwte.download(), g.floats("dwte"), kFp32));
  EXPECT_TRUE(AllClose("dwpe", dwpe.download(), g.floats("dwpe"), kFp32));
  k().embedding_backward(dwte.get(), dwpe.get(), dout.get(), tokens.get(), B, T, C);
  EXPECT_TRUE(AllClose("dwte after two calls", dwte.download(), Scaled(g.floats("dwte"), 2), kFp32));
  EXPECT_TRUE(AllClose("dwpe after two calls", dwpe.download(), Scaled(g.floats("dwpe"), 2), kFp32));
}

// ---- layernorm

TEST_P(Ops, LayerNormForward) {
  const auto g = GoldenCase::load("layernorm");
  auto inp = upload(g.floats("inp")), weight = upload(g.floats("weight")), bias = upload(g.floats("bias"));
  auto out = garbage(N * C), mean = garbage(N), rstd = garbage(N);
  k().layernorm_forward(out.get(), mean.get(), rstd.get(), inp.get(), weight.get(), bias.get(), N, C);
  expect_golden(g, {{"out", &out}, {"mean", &mean}, {"rstd", &rstd}});
}

TEST_P(Ops, LayerNormBackwardAccumulates) {
  const auto g = GoldenCase::load("layernorm");
  auto inp = upload(g.floats("inp")), weight = upload(g.floats("weight"));
  auto mean = upload(g.floats("mean")), rstd = upload(g.floats("rstd")), dout = upload(g.floats("dout"));
  auto dinp = zeros(N * C), dweight = zeros(C), dbias = zeros(C);
  auto backward = [&] {
    k().layernorm_backward(dinp.get(), dweight.get(), dbias.get(), dout.get(), inp.get(), weight.get(),
                           mean.get(), rstd.get(), N, C);
  };
  for (int calls = 1; calls <= 2; ++calls) {
    backward();
    expect_golden(g, {{"dinp", &dinp}, {"dweight", &dweight}, {"dbias", &dbias}}, calls);
  }
}

// ---- residual + layernorm, fused

// residual = a + b written, then normalised; the residual may be written over
// a (the model adds in place), so both the separate and the in-place forms run.
TEST_P(Ops, ResidualLayerNormForward) {
  const auto g = GoldenCase::load("residual_layernorm");
  auto weight = upload(g.floats("weight")), bias = upload(g.floats("bias")), b = upload(g.floats("b"));
  for (const bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "residual written over a" : "residual in its own buffer");
    auto a = upload(g.floats("a"));
    auto separate = garbage(N * C);
    float* residual = in_place ? a.get() : separate.get();
    auto out = garbage(N * C), mean = garbage(N), rstd = garbage(N);
    k().residual_layernorm_forward(residual, out.get(), mean.get(), rstd.get(), a.get(), b.get(), weight.get(),
                                   bias.get(), N, C);
    EXPECT_TRUE(AllClose("residual", (in_place ? a : separate).download(), g.floats("residual"), kFp32));
    expect_golden(g, {{"out", &out}, {"mean", &mean}, {"rstd", &rstd}});
  }
}

// The fused residual's backward is layernorm_backward adding into the
// residual stream's gradient, which holds what flowed back past the norm.
TEST_P(Ops, ResidualLayerNormBackwardAddsIntoTheResidualGradient) {
  const auto g = GoldenCase::load("residual_layernorm");
  auto residual = upload(g.floats("residual")), weight = upload(g.floats("weight"));
  auto mean = upload(g.floats("mean")), rstd = upload(g.floats("rstd")), dout = upload(g.floats("dout"));
  auto dresidual = upload(g.floats("dresidual")), dweight = zeros(C), dbias = zeros(C);
  k().layernorm_backward(dresidual.get(), dweight.get(), dbias.get(), dout.get(), residual.get(), weight.get(),
                         mean.get(), rstd.get(), N, C);
  EXPECT_TRUE(AllClose("da = db", dresidual.download(), g.floats("da"), kFp32));
  expect_golden(g, {{"dweight", &dweight}, {"dbias", &dbias}});
}

// ---- matmul + bias + GELU, fused

// The gradients here reach ~20 in magnitude (pre-activations spread over
// both GELU tails take large weights); entries that cancel towards 0 from
// such terms carry an error of the terms' scale (2.3e-6 observed in dweight
// after two accumulating calls, ~2^-23 of the largest), not of their own:
// kFp32 plus 1e-6 of the largest, as for the attention gradients.
constexpr Tolerance kMatmulGeluGradient{kFp32.rel, kFp32.abs, 1e-6};

TEST_P(Ops, MatmulGeluForwardAndBackward) {
  const auto g = GoldenCase::load("matmul_gelu");
  auto inp = upload(g.floats("inp")), weight = upload(g.floats("weight")), bias = upload(g.floats("bias"));
  auto out = garbage(N * OC), pre = garbage(N * OC);
  k().matmul_gelu_forward(out.get(), pre.get(), inp.get(), weight.get(), bias.get(), N, C, OC);
  EXPECT_TRUE(AllClose("pre", pre.download(), g.floats("pre"), kFp32));
  EXPECT_TRUE(AllClose("out", out.download(), g.floats("out"), kFp32));

  // dpre is overwritten (NaN before); dinp, dweight, dbias accumulate.
  auto dout = upload(g.floats("dout")), dpre = garbage(N * OC);
  auto dinp = zeros(N * C), dweight = zeros(OC * C), dbias = zeros(OC);
  for (int call = 1; call <= 2; ++call) {
    k().matmul_gelu_backward(dinp.get(), dweight.get(), dbias.get(), dpre.get(), dout.get(), pre.get(), inp.get(),
                             weight.get(), N, C, OC);
    const std::string calls = call == 1 ? "" : " after two calls";
    EXPECT_TRUE(AllClose("dpre" + calls, dpre.download(), g.floats("dpre"), kFp32));
    EXPECT_TRUE(
        AllClose("dinp" + calls, dinp.download(), Scaled(g.floats("dinp"), call), kMatmulGeluGradient));
    EXPECT_TRUE(
        AllClose("dweight" + calls, dweight.download(), Scaled(g.floats("dweight"), call), kMatmulGeluGradient));
    EXPECT_TRUE(
        AllClose("dbias" + calls, dbias.download(), Scaled(g.floats("dbias"), call), kMatmulGeluGradient));
  }
}

TEST_P(Ops, MatmulGeluNeedsABias) {
  const auto g = GoldenCase::load("matmul_gelu");
  auto inp = upload(g.floats("inp")), weight = upload(g.floats("weight"));
  auto out = garbage(N * OC), pre = garbage(N * OC);
  EXPECT_THROW(k().matmul_gelu_forward(out.get(), pre.get(), inp.get(), weight.get(), nullptr, N, C, OC),
               std::invalid_argument);
}

// ---- matmul

struct MatmulResult {
  std::vector<float> out, dinp, dweight, dbias;
};

// Forward, then one backward into zeroed gradients.
MatmulResult RunMatmul(Backend& k, const GoldenCase& g) {
  DeviceFloats inp(k, g.floats("inp")), weight(k, g.floats("weight")), bias(k, g.floats("bias"));
  DeviceFloats dout(k, g.floats("dout"));
  DeviceFloats out(k, NaNs(N * OC)), dinp(k, N * C), dweight(k, OC * C), dbias(k, OC);
  k.matmul_forward(out.get(), inp.get(), weight.get(), bias.get(), N, C, OC);
  k.matmul_backward(dinp.get(), dweight.get(), dbias.get(), dout.get(), inp.get(), weight.get(), N, C, OC);
  return {out.download(), dinp.download(), dweight.download(), dbias.download()};
}

TEST_P(Ops, MatmulForwardAndBackward) {
  const auto g = GoldenCase::load("matmul");
  const MatmulResult r = RunMatmul(k(), g);
  EXPECT_TRUE(AllClose("out", r.out, g.floats("out"), kFp32));
  EXPECT_TRUE(AllClose("dinp", r.dinp, g.floats("dinp"), kFp32));
  EXPECT_TRUE(AllClose("dweight", r.dweight, g.floats("dweight"), kFp32));
  EXPECT_TRUE(AllClose("dbias", r.dbias, g.floats("dbias"), kFp32));
}

// sgemm's beta = 1: dinp, dweight and dbias add to what is there.
TEST_P(Ops, MatmulBackwardAccumulates) {
  const auto g = GoldenCase::load("matmul");
  auto inp = upload(g.floats("inp")), weight = upload(g.floats("weight")), dout = upload(g.floats("dout"));
  auto dinp = zeros(N * C), dweight = zeros(OC * C), dbias = zeros(OC);
  for (int call = 0; call < 2; ++call) {
    k().matmul_backward(dinp.get(), dweight.get(), dbias.get(), dout.get(), inp.get(), weight.get(), N, C, OC);
  }
  EXPECT_TRUE(AllClose("dinp after two calls", dinp.download(), Scaled(g.floats("dinp"), 2), kFp32));
  EXPECT_TRUE(AllClose("dweight after two calls", dweight.download(), Scaled(g.floats("dweight"), 2), kFp32));
  EXPECT_TRUE(AllClose("dbias after two calls", dbias.download(), Scaled(g.floats("dbias"), 2), kFp32));
}

// bf16 operands: exactly "round the operands to bf16, multiply and add in
// fp32" (against float64 sums of the bf16-rounded operands, at the fp32
// tolerance), within the bf16 tolerance of the fp32 reference, and
// measurably not the fp32 result (else the precision setting did nothing).
TEST_P(Ops, MatmulBf16RoundsTheOperandsOnly) {
  const auto g = GoldenCase::load("matmul");
  const MatmulResult fp32 = RunMatmul(k(), g);
  k().set_matmul_precision(MatmulPrecision::bf16);
  const MatmulResult bf16 = RunMatmul(k(), g);
  k().set_matmul_precision(MatmulPrecision::fp32);
  EXPECT_TRUE(AllClose("out (bf16 operands)", bf16.out, g.floats("out_bf16"), kFp32));
  EXPECT_TRUE(AllClose("dinp (bf16 operands)", bf16.dinp, g.floats("dinp_bf16"), kFp32));
  EXPECT_TRUE(AllClose("dweight (bf16 operands)", bf16.dweight, g.floats("dweight_bf16"), kFp32));
  EXPECT_TRUE(AllClose("dbias (fp32 in bf16 mode)", bf16.dbias, g.floats("dbias"), kFp32));

  EXPECT_TRUE(AllClose("out (bf16 vs fp32)", bf16.out, g.floats("out"), kBf16));
  EXPECT_TRUE(AllClose("dinp (bf16 vs fp32)", bf16.dinp, g.floats("dinp"), kBf16));
  EXPECT_TRUE(AllClose("dweight (bf16 vs fp32)", bf16.dweight, g.floats("dweight"), kBf16));
  EXPECT_FALSE(AllClose("out", bf16.out, fp32.out, kFp32)) << "bf16 matmul gave the fp32 result";
  EXPECT_FALSE(AllClose("dweight", bf16.dweight, fp32.dweight, kFp32)) << "bf16 matmul gave the fp32 result";
}

// x * 1.0 with bf16 operands is x rounded to bf16 (8 significant bits):
// exact, so rounding ties to even is visible.
TEST_P(Ops, MatmulBf16RoundsOperandsToNearestEven) {
  const float ulp = std::ldexp(1.0f, -7);  // bf16 spacing in [1, 2)
  const std::vector<float> inputs = {
      1.0f + ulp / 2,              // tie between 1 and 1 + ulp: to the even 1
      1.0f + 3 * ulp / 2,          // tie between 1 + ulp and 1 + 2 ulp: to the even 1 + 2 ulp
      1.0f + ulp / 2 + ulp / 64,   // just above the tie: up
      -(1.0f + ulp / 2),           // sign-symmetric
      3.0f,                        // exact
  };
  const std::vector<float> rounded = {1.0f, 1.0f + 2 * ulp, 1.0f + ulp, -1.0f, 3.0f};
  const int rows = static_cast<int>(inputs.size());
  auto inp = upload(inputs), one = upload(std::vector<float>{1.0f}), out = garbage(inputs.size());
  k().set_matmul_precision(MatmulPrecision::bf16);
  k().matmul_forward(out.get(), inp.get(), one.get(), nullptr, rows, 1, 1);
  k().set_matmul_precision(MatmulPrecision::fp32);
  EXPECT_EQ(out.download(), rounded);
  k().matmul_forward(out.get(), inp.get(), one.get(), nullptr, rows, 1, 1);
  EXPECT_EQ(out.download(), inputs) << "fp32 matmul must not round";
}

// bf16 storage keeps a value's top 16 bits after rounding to nearest, ties
// to even (as torch's .bfloat16()); widening back is exact. Expected bit
// patterns by hand: 1 = 0x3f80, bf16 spacing in [1, 2) is 2^-7.
TEST_P(Ops, Bf16StorageRoundsToNearestEvenAndWidensExactly) {
  auto from_bits = [](std::uint32_t bits) { return std::bit_cast<float>(bits); };
  const float ulp = std::ldexp(1.0f, -7);
  struct Case {
    float value;
    std::uint16_t stored;
  };
  const std::vector<Case> cases = {
      {1.0f + ulp / 2, 0x3f80},                // tie: to the even 1
      {1.0f + 3 * ulp / 2, 0x3f82},            // tie: to the even 1 + 2 ulp
      {1.0f + ulp / 2 + ulp / 64, 0x3f81},     // above the tie: up
      {-(1.0f + ulp / 2), 0xbf80},             // sign-symmetric
      {3.0f, 0x4040},                          // exact
      {-0.0f, 0x8000},                         // the sign of zero kept
      {std::numeric_limits<float>::infinity(), 0x7f80},
      {std::numeric_limits<float>::max(), 0x7f80},  // rounds up past the largest bf16: infinity
      {from_bits(0x00018000u), 0x0002},        // a subnormal tie: to even, not flushed to zero
      {from_bits(0x00000001u), 0x0000},        // the smallest subnormal: to +0
  };
  std::vector<float> values;
  for (const Case& c : cases) values.push_back(c.value);
  values.push_back(std::numeric_limits<float>::quiet_NaN());
  auto in = upload(values), out = garbage(values.size());
  DeviceBf16 stored(k(), values.size());
  k().from_bf16(out.get(), stored.get(), values.size());
  EXPECT_EQ(out.download(), std::vector<float>(values.size(), 0.0f)) << "bf16 memory starts zeroed";
  k().to_bf16(stored.get(), in.get(), values.size());
  k().from_bf16(out.get(), stored.get(), values.size());
  const std::vector<float> widened = out.download();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(widened[i]), std::uint32_t{cases[i].stored} << 16)
        << "case " << i << ": " << cases[i].value;
  }
  EXPECT_TRUE(std::isnan(widened.back())) << "a NaN must stay a NaN, not become infinity";
}

// GPT-2's tied weights: wte embeds the tokens and is the LM head's weight
// (matmul without bias), so dwte collects both uses. The chain of a head
// stage: embedding -> matmul(wte) -> cross-entropy, and back.
TEST_P(Ops, TiedLmHeadForwardAndBackward) {
  const auto g = GoldenCase::load("tied_lm_head");
  auto tokens = upload(g.ints("tokens")), targets = upload(g.ints("targets"));
  auto wte = upload(g.floats("wte")), wpe = upload(g.floats("wpe"));
  auto x = garbage(N * C), logits = garbage(N * V), losses = garbage(N), dlogits = garbage(N * V);
  auto dx = zeros(N * C), dwte = zeros(V * C), dwpe = zeros(T * C);

  k().embedding_forward(x.get(), tokens.get(), wte.get(), wpe.get(), B, T, C);
  k().matmul_forward(logits.get(), x.get(), wte.get(), nullptr, N, C, V);
  k().crossentropy_forward(losses.get(), logits.get(), targets.get(), N, V);
  k().crossentropy_backward(dlogits.get(), logits.get(), targets.get(), g.scalar("dloss"), N, V);
  k().matmul_backward(dx.get(), dwte.get(), nullptr, dlogits.get(), x.get(), wte.get(), N, C, V);
  k().embedding_backward(dwte.get(), dwpe.get(), dx.get(), tokens.get(), B, T, C);

  EXPECT_TRUE(AllClose("x", x.download(), g.floats("x"), kFp32));
  EXPECT_TRUE(AllClose("logits", logits.download(), g.floats("logits"), kFp32));
  const std::vector<float> host_losses = losses.download();
  EXPECT_TRUE(AllClose("losses", host_losses, g.floats("losses"), kFp32));
  EXPECT_TRUE(AllClose("mean loss", {Mean(host_losses)}, {g.scalar("loss")}, kFp32));
  EXPECT_TRUE(AllClose("dlogits", dlogits.download(), g.floats("dlogits"), kFp32));
  EXPECT_TRUE(AllClose("dx", dx.download(), g.floats("dx"), kFp32));
  EXPECT_TRUE(AllClose("dwte (head + embedding)", dwte.download(), g.floats("dwte"), kFp32));
  EXPECT_TRUE(AllClose("dwpe", dwpe.download(), g.floats("dwpe"), kFp32));
}

// ---- attention

// The fused attention at several sequence lengths: one token, less than a
// tile, whole tiles and ragged ends (make_golden.py, ATTENTION_SHAPES). The
// shapes come from the files.
// Tolerance: kFp32, plus 1e-6 of the tensor's largest entry for the
// gradients that cancel to 0 by construction (a row whose only key is
// itself: ds = p (dp - D) with D = dp), whose error scales with the tensor
// (~2^-23 of it observed), not with their own value. A wrong scale, mask or
// tile edge moves entries by >= 1e-3 of the largest.
constexpr Tolerance kAttentionFp32{kFp32.rel, kFp32.abs, 1e-6};
const char* const kAttentionCases[] = {"attention", "attention_t1", "attention_t7", "attention_t64",
                                       "attention_t100", "attention_t130"};

struct AttentionShape {
  int B, T, C, NH;
};
AttentionShape ShapeOf(const GoldenCase& g) {
  const auto& qkv = g.shape("qkv");
  const auto& lse = g.shape("lse");
  return {static_cast<int>(qkv.at(0)), static_cast<int>(qkv.at(1)), static_cast<int>(qkv.at(2) / 3),
          static_cast<int>(lse.at(1))};
}

TEST_P(Ops, AttentionForward) {
  for (const char* name : kAttentionCases) {
    SCOPED_TRACE(name);
    const auto g = GoldenCase::load(name);
    const AttentionShape s = ShapeOf(g);
    auto qkv = upload(g.floats("qkv"));
    auto out = garbage(static_cast<std::size_t>(s.B) * s.T * s.C);
    auto lse = garbage(static_cast<std::size_t>(s.B) * s.NH * s.T);
    k().attention_forward(out.get(), lse.get(), qkv.get(), s.B, s.T, s.C, s.NH);
    EXPECT_TRUE(AllClose(std::string(name) + " out", out.download(), g.floats("out"), kFp32));
    EXPECT_TRUE(AllClose(std::string(name) + " lse", lse.download(), g.floats("lse"), kFp32));
  }
}

TEST_P(Ops, AttentionBackwardAccumulates) {
  for (const char* name : kAttentionCases) {
    SCOPED_TRACE(name);
    const auto g = GoldenCase::load(name);
    const AttentionShape s = ShapeOf(g);
    auto qkv = upload(g.floats("qkv")), out = upload(g.floats("out")), lse = upload(g.floats("lse"));
    auto dout = upload(g.floats("dout"));
    auto dqkv = zeros(g.floats("qkv").size()), scratch = garbage(static_cast<std::size_t>(s.B) * s.NH * s.T);
    k().attention_backward(dqkv.get(), scratch.get(), dout.get(), qkv.get(), out.get(), lse.get(), s.B, s.T, s.C,
                           s.NH);
    EXPECT_TRUE(AllClose(std::string(name) + " dqkv", dqkv.download(), g.floats("dqkv"), kAttentionFp32));
    k().attention_backward(dqkv.get(), scratch.get(), dout.get(), qkv.get(), out.get(), lse.get(), s.B, s.T, s.C,
                           s.NH);
    EXPECT_TRUE(AllClose(std::string(name) + " dqkv after two calls", dqkv.download(), Scaled(g.floats("dqkv"), 2),
                         kAttentionFp32));
  }
}

TEST_P(Ops, AttentionRejectsHeadsLargerThanTheKernelsHold) {
  constexpr int kB = 1, kT = 3, kC = 258, kNH = 2;  // 129 channels per head
  auto qkv = zeros(static_cast<std::size_t>(kB) * kT * 3 * kC), out = zeros(static_cast<std::size_t>(kB) * kT * kC);
  auto lse = zeros(static_cast<std::size_t>(kB) * kNH * kT);
  EXPECT_THROW(k().attention_forward(out.get(), lse.get(), qkv.get(), kB, kT, kC, kNH), std::invalid_argument);
}

// ---- GELU

TEST_P(Ops, GeluForward) {
  const auto g = GoldenCase::load("gelu");
  const std::size_t n = g.floats("inp").size();
  auto inp = upload(g.floats("inp")), out = garbage(n);
  k().gelu_forward(out.get(), inp.get(), n);
  EXPECT_TRUE(AllClose("out", out.download(), g.floats("out"), kFp32));
}

TEST_P(Ops, GeluBackwardAccumulates) {
  const auto g = GoldenCase::load("gelu");
  const std::size_t n = g.floats("inp").size();
  auto inp = upload(g.floats("inp")), dout = upload(g.floats("dout")), dinp = zeros(n);
  for (int calls = 1; calls <= 2; ++calls) {
    k().gelu_backward(dinp.get(), inp.get(), dout.get(), n);
    expect_golden(g, {{"dinp", &dinp}}, calls);
  }
}

// ---- residual and elementwise helpers

TEST_P(Ops, ResidualForwardAndAccumulate) {
  const auto g = GoldenCase::load("residual");
  const std::size_t n = g.floats("a").size();
  auto a = upload(g.floats("a")), b = upload(g.floats("b")), out = garbage(n);
  k().residual_forward(out.get(), a.get(), b.get(), n);
  EXPECT_TRUE(AllClose("a + b", out.download(), g.floats("out"), kFp32));
  // The residual's backward: the same gradient added into both branches.
  k().fill_zero(out.get(), n);
  k().accumulate(out.get(), a.get(), n);
  k().accumulate(out.get(), b.get(), n);
  EXPECT_TRUE(AllClose("0 + a + b", out.download(), g.floats("out"), kFp32));
}

TEST_P(Ops, ScaleAndSumOfSquares) {
  const auto g = GoldenCase::load("residual");
  const std::size_t n = g.floats("a").size();
  auto a = upload(g.floats("a"));
  const double sum = k().sum_of_squares(a.get(), n);
  EXPECT_TRUE(AllClose("sum of squares", {static_cast<float>(sum)}, {g.scalar("sum_of_squares")}, kFp32));
  k().scale(a.get(), g.scalar("factor"), n);
  EXPECT_TRUE(AllClose("a * factor", a.download(), g.floats("scaled"), kFp32));
}

// ---- cross-entropy

TEST_P(Ops, CrossEntropyForwardIsStableForLargeLogits) {
  const auto g = GoldenCase::load("crossentropy");
  auto logits = upload(g.floats("logits")), losses = garbage(N);
  auto targets = upload(g.ints("targets"));
  k().crossentropy_forward(losses.get(), logits.get(), targets.get(), N, V);
  const std::vector<float> host = losses.download();
  for (float loss : host) ASSERT_TRUE(std::isfinite(loss)) << "a loss overflowed";
  EXPECT_TRUE(AllClose("losses", host, g.floats("losses"), kFp32));
  EXPECT_TRUE(AllClose("mean loss", {Mean(host)}, {g.scalar("loss")}, kFp32));
}

// dlogits is overwritten: NaN before, or a second call, changes nothing.
TEST_P(Ops, CrossEntropyBackwardOverwrites) {
  const auto g = GoldenCase::load("crossentropy");
  auto logits = upload(g.floats("logits"));
  auto targets = upload(g.ints("targets"));
  auto dlogits = garbage(N * V);
  for (int call = 1; call <= 2; ++call) {
    k().crossentropy_backward(dlogits.get(), logits.get(), targets.get(), g.scalar("dloss"), N, V);
    EXPECT_TRUE(AllClose("dlogits after call " + std::to_string(call), dlogits.download(), g.floats("dlogits"),
                         kFp32));
  }
}

// ---- vocabulary-parallel embedding and cross-entropy (tensor parallelism)
//
// A group of ranks each holding a contiguous range of the vocabulary. The
// references are independent of the shard ops: a hand computation, the
// PyTorch golden files of the unsharded ops, and the unsharded ops
// themselves (whose golden tests are above); the group's sums (MAX over the
// row maxima, SUM over the statistics and the embeddings) are done here on
// the host, as the communication layer would.

struct VocabShard {
  int begin, rows;
};

// Columns [shard.begin, shard.begin + shard.rows) of x[N, V], as [N, rows].
std::vector<float> Columns(const std::vector<float>& x, int V, VocabShard shard) {
  const std::size_t rows = x.size() / static_cast<std::size_t>(V);
  std::vector<float> out;
  out.reserve(rows * static_cast<std::size_t>(shard.rows));
  for (std::size_t r = 0; r < rows; ++r) {
    const auto first = x.begin() + static_cast<std::ptrdiff_t>(r * V + shard.begin);
    out.insert(out.end(), first, first + shard.rows);
  }
  return out;
}

// Rows [shard.begin, shard.begin + shard.rows) of a table[., C].
std::vector<float> Rows(const std::vector<float>& table, int C, VocabShard shard) {
  const auto first = table.begin() + static_cast<std::ptrdiff_t>(shard.begin) * C;
  return std::vector<float>(first, first + static_cast<std::ptrdiff_t>(shard.rows) * C);
}

// Deterministic pseudo-random values in [low, high) (a 32-bit LCG: the same on
// every standard library).
std::vector<float> PseudoRandom(std::size_t n, float low, float high, std::uint32_t seed) {
  std::vector<float> values(n);
  std::uint32_t state = seed;
  for (float& v : values) {
    state = state * 1664525u + 1013904223u;
    v = low + (high - low) * static_cast<float>(state >> 8) / 16777216.0f;
  }
  return values;
}

// The results of the three cross-entropy passes over a partition of the
// vocabulary, combined as the group would.
struct ShardedCrossEntropy {
  std::vector<float> row_max;                  // [N], MAX over the shards
  std::vector<std::vector<float>> shard_max;   // per shard, [N]
  std::vector<std::vector<float>> shard_stats; // per shard, [N, 2]
  std::vector<float> stats;                    // [N, 2], SUM over the shards
  std::vector<float> losses;                   // log(stats[2n]) - stats[2n + 1]
  std::vector<float> dlogits;                  // [N, V], the shards' columns put back together
};

class ShardOps : public Ops {
 protected:
  ShardedCrossEntropy CrossEntropyOverShards(const std::vector<float>& logits, const std::vector<int>& targets,
                                             int rows, int V, const std::vector<VocabShard>& shards, float dloss) {
    ShardedCrossEntropy r;
    auto device_targets = upload(targets);
    std::vector<std::unique_ptr<DeviceFloats>> shard_logits;
    r.row_max.assign(rows, -INFINITY);
    for (const VocabShard& shard : shards) {
      shard_logits.push_back(std::make_unique<DeviceFloats>(k(), Columns(logits, V, shard)));
      auto row_max = garbage(rows);
      k().crossentropy_shard_max(row_max.get(), shard_logits.back()->get(), rows, shard.rows);
      r.shard_max.push_back(row_max.download());
      for (int n = 0; n < rows; ++n) r.row_max[n] = std::max(r.row_max[n], r.shard_max.back()[n]);
    }
    auto row_max = upload(r.row_max);
    r.stats.assign(2 * static_cast<std::size_t>(rows), 0.0f);
    for (std::size_t s = 0; s < shards.size(); ++s) {
      auto stats = garbage(2 * static_cast<std::size_t>(rows));
      k().crossentropy_shard_statistics(stats.get(), shard_logits[s]->get(), device_targets.get(), row_max.get(),
                                        rows, shards[s].rows, shards[s].begin);
      r.shard_stats.push_back(stats.download());
      for (std::size_t i = 0; i < r.stats.size(); ++i) r.stats[i] += r.shard_stats.back()[i];
    }
    for (int n = 0; n < rows; ++n) r.losses.push_back(std::log(r.stats[2 * n]) - r.stats[2 * n + 1]);
    auto stats = upload(r.stats);
    r.dlogits.assign(static_cast<std::size_t>(rows) * V, NAN);
    for (std::size_t s = 0; s < shards.size(); ++s) {
      auto dlogits = garbage(static_cast<std::size_t>(rows) * shards[s].rows);
      k().crossentropy_shard_backward(dlogits.get(), shard_logits[s]->get(), device_targets.get(), row_max.get(),
                                      stats.get(), dloss, rows, shards[s].rows, shards[s].begin);
      const std::vector<float> host = dlogits.download();
      for (int n = 0; n < rows; ++n) {
        for (int j = 0; j < shards[s].rows; ++j) {
          r.dlogits[static_cast<std::size_t>(n) * V + shards[s].begin + j] =
              host[static_cast<std::size_t>(n) * shards[s].rows + j];
        }
      }
    }
    return r;
  }
};

INSTANTIATE_TEST_SUITE_P(Backends, ShardOps, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// By hand: V = 4, C = 2, shards {0} and {1, 2, 3}, tokens (3, 0, 3); wpe
// passed by the second shard only.
//   wte = [1 2; 3 4; 5 6; 7 8], wpe = [10 20; 30 40; 50 60]
//   shard 0: out = [0 0; 1 2; 0 0]
//   shard 1: out = [7+10 8+20; 30 40; 7+50 8+60] = [17 28; 30 40; 57 68]
// Backward with dout = [1 2; 3 4; 5 6], dwte_rows starting at 0.5:
//   shard 0: dwte_rows = [0.5+3 0.5+4]                           (token 0 at t = 1)
//   shard 1: dwte_rows = [0.5 0.5; 0.5 0.5; 0.5+1+5 0.5+2+6]     (token 3 at t = 0, 2)
//            dwpe = dout (B = 1)
TEST_P(ShardOps, EmbeddingByHand) {
  auto tokens = upload(std::vector<int>{3, 0, 3});
  auto wte0 = upload(std::vector<float>{1, 2});
  auto wte1 = upload(std::vector<float>{3, 4, 5, 6, 7, 8});
  auto wpe = upload(std::vector<float>{10, 20, 30, 40, 50, 60});
  auto out0 = garbage(6), out1 = garbage(6);
  k().embedding_shard_forward(out0.get(), tokens.get(), wte0.get(), nullptr, 1, 3, 2, 0, 1);
  k().embedding_shard_forward(out1.get(), tokens.get(), wte1.get(), wpe.get(), 1, 3, 2, 1, 3);
  EXPECT_TRUE(AllClose("shard 0 out", out0.download(), {0, 0, 1, 2, 0, 0}, kExact));
  EXPECT_TRUE(AllClose("shard 1 out", out1.download(), {17, 28, 30, 40, 57, 68}, kExact));

  auto dout = upload(std::vector<float>{1, 2, 3, 4, 5, 6});
  auto dwte0 = upload(std::vector<float>(2, 0.5f)), dwte1 = upload(std::vector<float>(6, 0.5f));
  auto dwpe = zeros(6);
  k().embedding_shard_backward(dwte0.get(), nullptr, dout.get(), tokens.get(), 1, 3, 2, 0, 1);
  k().embedding_shard_backward(dwte1.get(), dwpe.get(), dout.get(), tokens.get(), 1, 3, 2, 1, 3);
  EXPECT_TRUE(AllClose("shard 0 dwte_rows", dwte0.download(), {3.5f, 4.5f}, kExact));
  EXPECT_TRUE(AllClose("shard 1 dwte_rows", dwte1.download(), {0.5f, 0.5f, 0.5f, 0.5f, 6.5f, 8.5f}, kExact));
  EXPECT_TRUE(AllClose("shard 1 dwpe", dwpe.download(), {1, 2, 3, 4, 5, 6}, kExact));
}

// By hand: N = 2 rows, V = 4, shards {0, 1} and {2, 3}, dloss = 0.5.
//   row 0: logits (ln 2, 0, 0, 0), target 3. Maxima ln 2 | 0, so row_max = ln 2;
//          exp(x - ln 2) = (1, 1/2, 1/2, 1/2): stats (3/2, 0) | (1, -ln 2);
//          sum 5/2, loss = ln(5/2) + ln 2 = ln 5; softmax (2/5, 1/5, 1/5, 1/5).
//   row 1: logits (0, ln 2, ln 4, 0), target 0. Maxima ln 2 | ln 4, so row_max = ln 4;
//          exp(x - ln 4) = (1/4, 1/2, 1, 1/4): stats (3/4, -ln 4) | (5/4, 0);
//          sum 2, loss = ln 2 + ln 4 = 3 ln 2; softmax (1/8, 1/4, 1/2, 1/8).
//   dlogits = (softmax - onehot(target)) * 0.5.
TEST_P(ShardOps, CrossEntropyByHand) {
  const float ln2 = std::log(2.0f), ln4 = std::log(4.0f);
  const std::vector<float> logits{ln2, 0, 0, 0, 0, ln2, ln4, 0};
  const ShardedCrossEntropy r = CrossEntropyOverShards(logits, {3, 0}, 2, 4, {{0, 2}, {2, 2}}, 0.5f);
  EXPECT_TRUE(AllClose("shard 0 row_max", r.shard_max[0], {ln2, ln2}, kExact));
  EXPECT_TRUE(AllClose("shard 1 row_max", r.shard_max[1], {0, ln4}, kExact));
  EXPECT_TRUE(AllClose("shard 0 stats", r.shard_stats[0], {1.5f, 0.0f, 0.75f, -ln4}, kFp32));
  EXPECT_TRUE(AllClose("shard 1 stats", r.shard_stats[1], {1.0f, -ln2, 1.25f, 0.0f}, kFp32));
  EXPECT_EQ(r.shard_stats[0][1], 0.0f) << "a shard without the target adds exactly 0";
  EXPECT_EQ(r.shard_stats[1][3], 0.0f) << "a shard without the target adds exactly 0";
  EXPECT_TRUE(AllClose("losses", r.losses, {std::log(5.0f), 3 * ln2}, kFp32));
  EXPECT_TRUE(AllClose("dlogits", r.dlogits,
                       {0.2f, 0.1f, 0.1f, -0.4f,            // (2/5, 1/5, 1/5, 1/5 - 1) / 2
                        -0.4375f, 0.125f, 0.25f, 0.0625f},  // (1/8 - 1, 1/4, 1/2, 1/8) / 2
                       kFp32));
}

// The golden embedding case (V = 17) over three uneven shards: the shards'
// outputs sum to PyTorch's, and their gradients are PyTorch's rows.
TEST_P(ShardOps, EmbeddingShardsSumToTheGolden) {
  const auto g = GoldenCase::load("embedding");
  const std::vector<VocabShard> shards{{0, 7}, {7, 6}, {13, 4}};  // tokens 6 | 8, 12 | 13, 14
  const std::vector<int>& host_tokens = g.ints("tokens");
  for (const VocabShard& shard : shards) {
    ASSERT_TRUE(std::any_of(host_tokens.begin(), host_tokens.end(), [&](int token) {
      return token >= shard.begin && token < shard.begin + shard.rows;
    })) << "no token in the shard at " << shard.begin << " (the test would not reach it)";
  }
  auto tokens = upload(host_tokens);
  auto wpe = upload(g.floats("wpe")), dout = upload(g.floats("dout"));
  std::vector<float> sum(N * C, 0.0f), dwte;
  auto dwpe = zeros(g.floats("dwpe").size());
  for (std::size_t s = 0; s < shards.size(); ++s) {
    const bool positions = s == 1;  // one shard, here not the first, adds wpe
    auto wte_rows = upload(Rows(g.floats("wte"), C, shards[s]));
    auto out = garbage(N * C);
    k().embedding_shard_forward(out.get(), tokens.get(), wte_rows.get(), positions ? wpe.get() : nullptr, B, T, C,
                                shards[s].begin, shards[s].rows);
    const std::vector<float> host = out.download();
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += host[i];
    auto dwte_rows = zeros(static_cast<std::size_t>(shards[s].rows) * C);
    k().embedding_shard_backward(dwte_rows.get(), positions ? dwpe.get() : nullptr, dout.get(), tokens.get(), B, T,
                                 C, shards[s].begin, shards[s].rows);
    const std::vector<float> rows = dwte_rows.download();
    dwte.insert(dwte.end(), rows.begin(), rows.end());
  }
  EXPECT_TRUE(AllClose("sum of the shards' out", sum, g.floats("out"), kFp32));
  EXPECT_TRUE(AllClose("shards' dwte_rows, concatenated", dwte, g.floats("dwte"), kFp32));
  EXPECT_TRUE(AllClose("dwpe (one shard)", dwpe.download(), g.floats("dwpe"), kFp32));
}

// The golden cross-entropy case (V = 17, one row of logits of several
// hundred) over three uneven shards, one of a single column.
TEST_P(ShardOps, CrossEntropyShardsReproduceTheGolden) {
  const auto g = GoldenCase::load("crossentropy");
  const std::vector<VocabShard> shards{{0, 5}, {5, 1}, {6, 11}};  // the targets reach each
  const ShardedCrossEntropy r =
      CrossEntropyOverShards(g.floats("logits"), g.ints("targets"), N, V, shards, g.scalar("dloss"));
  for (float loss : r.losses) ASSERT_TRUE(std::isfinite(loss)) << "a loss overflowed";
  EXPECT_TRUE(AllClose("losses from the shards' statistics", r.losses, g.floats("losses"), kFp32));
  EXPECT_TRUE(AllClose("shards' dlogits, concatenated", r.dlogits, g.floats("dlogits"), kFp32));
}

// V = 37 over three uneven shards, against the unsharded ops on the same
// backend and a double-precision reference computed here. Rows 0-2 have
// their target in shard 0, 1, 2; every shard has rows whose target it does
// not hold (its target term must be exactly 0). The embedding's tokens
// reach every shard, and a fourth, empty shard (vocab_rows = 0, no wte
// rows) embeds nothing.
TEST_P(ShardOps, PartitionOfTheVocabularyEqualsTheUnshardedOps) {
  constexpr int kV = 37, kB = 2, kT = 7, kC = 5, kN = kB * kT;
  const std::vector<VocabShard> shards{{0, 4}, {4, 21}, {25, 12}};
  const std::vector<int> targets{1, 10, 30, 36, 0, 24, 25, 3, 4, 17, 33, 29, 2, 12};
  const std::vector<int> host_tokens{36, 0, 3, 3, 4, 24, 25, 0, 36, 36, 11, 11, 3, 28};
  std::vector<float> logits = PseudoRandom(static_cast<std::size_t>(kN) * kV, -4.0f, 4.0f, 37);
  for (int j = 0; j < kV; ++j) logits[5 * kV + j] *= 100.0f;  // exp() overflows without the maximum
  const float dloss = 1.0f / kN;

  // Cross-entropy: the unsharded ops ...
  auto device_logits = upload(logits);
  auto device_targets = upload(targets);
  auto losses = garbage(kN), dlogits = garbage(static_cast<std::size_t>(kN) * kV);
  k().crossentropy_forward(losses.get(), device_logits.get(), device_targets.get(), kN, kV);
  k().crossentropy_backward(dlogits.get(), device_logits.get(), device_targets.get(), dloss, kN, kV);
  // ... and in double, here.
  std::vector<float> want_losses(kN), want_dlogits(static_cast<std::size_t>(kN) * kV);
  for (int n = 0; n < kN; ++n) {
    const float* x = logits.data() + static_cast<std::size_t>(n) * kV;
    const double max = *std::max_element(x, x + kV);
    double sum = 0.0;
    for (int j = 0; j < kV; ++j) sum += std::exp(x[j] - max);
    want_losses[n] = static_cast<float>(std::log(sum) - (x[targets[n]] - max));
    for (int j = 0; j < kV; ++j) {
      want_dlogits[static_cast<std::size_t>(n) * kV + j] =
          static_cast<float>((std::exp(x[j] - max) / sum - (j == targets[n] ? 1.0 : 0.0)) * dloss);
    }
  }
  const ShardedCrossEntropy r = CrossEntropyOverShards(logits, targets, kN, kV, shards, dloss);
  for (std::size_t s = 0; s < shards.size(); ++s) {
    for (int n = 0; n < kN; ++n) {
      const bool holds = targets[n] >= shards[s].begin && targets[n] < shards[s].begin + shards[s].rows;
      if (!holds) {
        EXPECT_EQ(r.shard_stats[s][2 * n + 1], 0.0f) << "shard " << s << ", row " << n;
      }
    }
  }
  EXPECT_TRUE(AllClose("sharded losses vs crossentropy_forward", r.losses, losses.download(), kFp32));
  EXPECT_TRUE(AllClose("sharded losses vs double", r.losses, want_losses, kFp32));
  EXPECT_TRUE(AllClose("sharded dlogits vs crossentropy_backward", r.dlogits, dlogits.download(), kFp32));
  EXPECT_TRUE(AllClose("sharded dlogits vs double", r.dlogits, want_dlogits, kFp32));

  // Embedding: each token's row and each position's row is added once, in
  // the same order as the unsharded op, so the results are bitwise equal.
  const std::vector<float> wte = PseudoRandom(static_cast<std::size_t>(kV) * kC, -1.0f, 1.0f, 38);
  const std::vector<float> wpe_host = PseudoRandom(static_cast<std::size_t>(kT) * kC, -1.0f, 1.0f, 39);
  const std::vector<float> dout_host = PseudoRandom(static_cast<std::size_t>(kN) * kC, -1.0f, 1.0f, 40);
  auto tokens = upload(host_tokens);
  auto wpe = upload(wpe_host), dout = upload(dout_host);
  auto full_wte = upload(wte), out = garbage(static_cast<std::size_t>(kN) * kC);
  auto full_dwte = upload(std::vector<float>(wte.size(), 0.25f)), full_dwpe = zeros(wpe_host.size());
  k().embedding_forward(out.get(), tokens.get(), full_wte.get(), wpe.get(), kB, kT, kC);
  k().embedding_backward(full_dwte.get(), full_dwpe.get(), dout.get(), tokens.get(), kB, kT, kC);

  std::vector<float> sum(static_cast<std::size_t>(kN) * kC, 0.0f), dwte;
  auto dwpe = zeros(wpe_host.size());
  for (std::size_t s = 0; s < shards.size(); ++s) {
    const bool positions = s == 2;
    auto wte_rows = upload(Rows(wte, kC, shards[s]));
    auto shard_out = garbage(sum.size());
    k().embedding_shard_forward(shard_out.get(), tokens.get(), wte_rows.get(), positions ? wpe.get() : nullptr, kB,
                                kT, kC, shards[s].begin, shards[s].rows);
    const std::vector<float> host = shard_out.download();
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += host[i];
    auto dwte_rows = upload(std::vector<float>(static_cast<std::size_t>(shards[s].rows) * kC, 0.25f));
    k().embedding_shard_backward(dwte_rows.get(), positions ? dwpe.get() : nullptr, dout.get(), tokens.get(), kB, kT,
                                 kC, shards[s].begin, shards[s].rows);
    const std::vector<float> rows = dwte_rows.download();
    dwte.insert(dwte.end(), rows.begin(), rows.end());
  }
  EXPECT_TRUE(AllClose("sum of the shards' out vs embedding_forward", sum, out.download(), kExact));
  EXPECT_TRUE(AllClose("shards' dwte_rows vs embedding_backward", dwte, full_dwte.download(), kExact));
  EXPECT_TRUE(AllClose("dwpe vs embedding_backward", dwpe.download(), full_dwpe.download(), kExact));

  // The empty shard at the end of the vocabulary: zeros, and no gradient anywhere.
  auto empty_out = garbage(sum.size());
  k().embedding_shard_forward(empty_out.get(), tokens.get(), nullptr, nullptr, kB, kT, kC, kV, 0);
  EXPECT_TRUE(AllClose("empty shard out", empty_out.download(), std::vector<float>(sum.size(), 0.0f), kExact));
  k().embedding_shard_backward(nullptr, nullptr, dout.get(), tokens.get(), kB, kT, kC, kV, 0);
  k().synchronize();
}

// ---- AdamW

TEST_P(Ops, AdamwTwoStepsMatchTorch) {
  const auto g = GoldenCase::load("adamw");
  const std::size_t n = g.floats("params0").size();
  auto params = upload(g.floats("params0")), m = zeros(n), v = zeros(n);
  for (int step = 1; step <= 2; ++step) {
    const std::string s = std::to_string(step);
    auto grads = upload(g.floats("grads" + s));
    k().adamw_update(params.get(), grads.get(), m.get(), v.get(), n, g.scalar("lr"), g.scalar("beta1"),
                     g.scalar("beta2"), g.scalar("eps"), g.scalar("weight_decay"), step);
    EXPECT_TRUE(AllClose("m after step " + s, m.download(), g.floats("m" + s), kFp32));
    EXPECT_TRUE(AllClose("v after step " + s, v.download(), g.floats("v" + s), kFp32));
    EXPECT_TRUE(AllClose("params after step " + s, params.download(), g.floats("params" + s), kFp32));
  }
}

// ---- memory

TEST_P(Ops, MemoryStartsZeroedAndRoundTrips) {
  const std::size_t n = 1001;
  auto x = zeros(n);
  EXPECT_EQ(x.download(), std::vector<float>(n, 0.0f));
  std::vector<float> pattern(n);
  for (std::size_t i = 0; i < n; ++i) pattern[i] = static_cast<float>(i) * 0.5f - 3.0f;
  k().upload(x.get(), pattern.data(), n);
  EXPECT_EQ(x.download(), pattern);
  k().fill_zero(x.get(), n);
  EXPECT_EQ(x.download(), std::vector<float>(n, 0.0f));
  // Zeroed token buffers embed token 0 everywhere.
  auto tokens = DeviceInts(k(), std::size_t{N});
  auto wte = upload(std::vector<float>(V * C, 0.0f)), wpe = zeros(T * C), out = zeros(N * C);
  std::vector<float> row0(V * C, 0.0f);
  for (int c = 0; c < C; ++c) row0[c] = 1.0f + static_cast<float>(c);
  k().upload(wte.get(), row0.data(), row0.size());
  k().embedding_forward(out.get(), tokens.get(), wte.get(), wpe.get(), B, T, C);
  const std::vector<float> embedded = out.download();
  for (int i = 0; i < N * C; ++i) ASSERT_EQ(embedded[i], 1.0f + static_cast<float>(i % C)) << "element " << i;
}

}  // namespace
}  // namespace geotrain::test
