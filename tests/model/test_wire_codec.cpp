// Wire encodings and error feedback, against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "geotrain/runtime/wire_codec.hpp"

namespace geotrain::runtime {
namespace {

std::vector<float> round_trip(const WireCodec& codec, const std::vector<float>& x, std::vector<std::uint8_t>* bytes) {
  bytes->assign(codec.encoded_bytes(x.size()), 0);
  codec.encode(x.data(), x.size(), bytes->data());
  std::vector<float> back(x.size(), -99.0f);
  codec.decode(bytes->data(), x.size(), back.data());
  return back;
}

TEST(WireCodec, Int8CodesRoundHalfToEvenWithOneScalePerGroup) {
  const WireCodec codec{WireFormat::int8, 4, 0};
  std::vector<std::uint8_t> bytes;
  // max |x| = 1: scale 1/127; codes 127, -63.5 -> -64 (even), 31.75 -> 32, 12.7 -> 13.
  const auto back = round_trip(codec, {1.0f, -0.5f, 0.25f, 0.1f}, &bytes);
  ASSERT_EQ(bytes.size(), 4u + 4u);
  EXPECT_EQ(static_cast<std::int8_t>(bytes[4]), 127);
  EXPECT_EQ(static_cast<std::int8_t>(bytes[5]), -64);
  EXPECT_EQ(static_cast<std::int8_t>(bytes[6]), 32);
  EXPECT_EQ(static_cast<std::int8_t>(bytes[7]), 13);
  const float scale = 1.0f / 127.0f;
  EXPECT_FLOAT_EQ(back[0], 127 * scale);
  EXPECT_FLOAT_EQ(back[1], -64 * scale);
  EXPECT_FLOAT_EQ(back[2], 32 * scale);
  EXPECT_FLOAT_EQ(back[3], 13 * scale);
}

TEST(WireCodec, Int4PacksTwoCodesPerByteLowNibbleFirst) {
  const WireCodec codec{WireFormat::int4, 2, 0};
  std::vector<std::uint8_t> bytes;
  // Group 0: max 0.7, scale 0.1: codes 7 and -3.5 -> -4. Group 1: max 3, scale 3/7: codes 7 and 7/3 -> 2.
  const auto back = round_trip(codec, {0.7f, -0.35f, 3.0f, 1.0f}, &bytes);
  ASSERT_EQ(bytes.size(), 2u * 4u + 2u);
  EXPECT_EQ(bytes[8], 0xC7);  // 7, then -4 = 0xC
  EXPECT_EQ(bytes[9], 0x27);  // 7, then 2
  EXPECT_NEAR(back[0], 0.7f, 1e-6);
  EXPECT_NEAR(back[1], -0.4f, 1e-6);
  EXPECT_NEAR(back[2], 3.0f, 1e-6);
  EXPECT_NEAR(back[3], 2 * 3.0f / 7.0f, 1e-6);
}

TEST(WireCodec, QuantisationErrorIsAtMostHalfAStep) {
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(1000);
  for (float& v : x) v = normal(random);
  x[10] = 0;
  for (const WireFormat format : {WireFormat::int8, WireFormat::int4}) {
    const WireCodec codec{format, 64, 0};
    std::vector<std::uint8_t> bytes;
    const auto back = round_trip(codec, x, &bytes);
    EXPECT_EQ(bytes.size(), 16u * 4u + (format == WireFormat::int8 ? 1000u : 500u));
    const float qmax = format == WireFormat::int8 ? 127.0f : 7.0f;
    for (std::size_t g = 0; g < 16; ++g) {
      float largest = 0;
      for (std::size_t i = g * 64; i < std::min<std::size_t>(1000, g * 64 + 64); ++i) largest = std::max(largest, std::fabs(x[i]));
      for (std::size_t i = g * 64; i < std::min<std::size_t>(1000, g * 64 + 64); ++i) {
        ASSERT_LE(std::fabs(back[i] - x[i]), 0.5f * largest / qmax * (1 + 1e-5f)) << to_string(format) << " " << i;
      }
    }
    EXPECT_EQ(back[10], 0.0f);
  }
}

TEST(WireCodec, AllZeroAndNonFiniteGroupsDecodeToZeros) {
  const WireCodec codec{WireFormat::int8, 2, 0};
  std::vector<std::uint8_t> bytes;
  const auto back = round_trip(codec, {0.0f, 0.0f, INFINITY, 1.0f}, &bytes);
  EXPECT_EQ(back[0], 0.0f);
  EXPECT_EQ(back[1], 0.0f);
  EXPECT_TRUE(std::isfinite(back[2]) && std::isfinite(back[3]));
}

TEST(WireCodec, TopKKeepsTheLargestMagnitudesTiesToTheLowerIndex) {
  const WireCodec codec{WireFormat::topk, 64, 0.4};
  std::vector<std::uint8_t> bytes;
  const auto back = round_trip(codec, {0.1f, -5.0f, 3.0f, 0.0f, 3.0f}, &bytes);
  EXPECT_EQ(bytes.size(), 2u * 8u);  // ceil(0.4 x 5) = 2 pairs of (uint32, float)
  EXPECT_EQ(back, (std::vector<float>{0.0f, -5.0f, 3.0f, 0.0f, 0.0f}));
}

TEST(WireCodec, Fp32IsExact) {
  const WireCodec codec{WireFormat::fp32, 64, 0};
  std::vector<std::uint8_t> bytes;
  const std::vector<float> x = {1.5f, -2.25e-30f, 3e30f};
  EXPECT_EQ(round_trip(codec, x, &bytes), x);
}

// What error feedback promises: after T steps, the decoded tensors plus the
// residual add up to the inputs, so nothing is lost, only delayed.
TEST(ErrorFeedback, DecodedPlusResidualAddsUpToTheInputs) {
  std::mt19937 random(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const WireFormat format : {WireFormat::int4, WireFormat::topk}) {
    ErrorFeedback feedback(WireCodec{format, 32, 0.05});
    const std::size_t n = 200;
    std::vector<double> sent(n, 0.0), given(n, 0.0);
    std::vector<std::uint8_t> bytes(feedback.codec().encoded_bytes(n));
    std::vector<float> x(n), decoded(n);
    for (int step = 0; step < 50; ++step) {
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = normal(random);
        given[i] += x[i];
      }
      feedback.encode(x.data(), n, bytes.data(), decoded.data());
      for (std::size_t i = 0; i < n; ++i) sent[i] += decoded[i];
    }
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(sent[i] + feedback.residual()[i], given[i], 1e-4) << to_string(format) << " " << i;
    }
    // With top-k at 5 %, every value has gone out several times in 50 steps: the residual stays bounded.
    double largest = 0;
    for (float r : feedback.residual()) largest = std::max(largest, static_cast<double>(std::fabs(r)));
    EXPECT_LT(largest, 20.0) << to_string(format);
  }
}

}  // namespace
}  // namespace geotrain::runtime
