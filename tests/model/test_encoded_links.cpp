// Encoded pipeline links around an in-process link: what arrives is what the
// codec decodes, carried in the codec's size.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "geotrain/runtime/encoded_links.hpp"

namespace geotrain::runtime {
namespace {

// Every message kept by (micro-batch, direction); a receive takes it.
class Loopback : public PipelineLinks {
 public:
  std::map<std::pair<int, bool>, std::vector<float>> wire;
  void send_activation(const float* d, std::size_t n, int i) override { wire[{i, false}].assign(d, d + n); }
  void send_gradient(const float* d, std::size_t n, int i) override { wire[{i, true}].assign(d, d + n); }
  void receive_activation(float* d, std::size_t n, int i) override { take(d, n, {i, false}); }
  void receive_gradient(float* d, std::size_t n, int i) override { take(d, n, {i, true}); }

 private:
  void take(float* d, std::size_t n, std::pair<int, bool> key) {
    ASSERT_EQ(wire.at(key).size(), n);  // the receiver expects the sender's carrier size
    std::copy(wire[key].begin(), wire[key].end(), d);
  }
};

TEST(EncodedLinks, ReceiversGetTheDecodedTensorInTheEncodedSize) {
  std::mt19937 random(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> activation(1000), gradient(1000);
  for (float& v : activation) v = normal(random);
  for (float& v : gradient) v = normal(random);
  const WireCodec int8{WireFormat::int8, 64, 0}, int4{WireFormat::int4, 64, 0};
  auto inner = std::make_unique<Loopback>();
  Loopback* wire = inner.get();
  EncodedPipelineLinks links(std::move(inner), int8, int4);
  links.send_activation(activation.data(), activation.size(), 3);
  links.send_gradient(gradient.data(), gradient.size(), 3);
  // 1000 int8 values + 16 scales = 1064 bytes = 266 floats; int4: 500 + 64 = 564 bytes = 141 floats.
  EXPECT_EQ(wire->wire[std::make_pair(3, false)].size(), 266u);
  EXPECT_EQ(wire->wire[std::make_pair(3, true)].size(), 141u);
  std::vector<float> got(1000), expected(1000), bytes_as_floats(266);
  links.receive_activation(got.data(), got.size(), 3);
  std::vector<std::uint8_t> bytes(int8.encoded_bytes(1000));
  int8.encode(activation.data(), 1000, bytes.data());
  int8.decode(bytes.data(), 1000, expected.data());
  EXPECT_EQ(got, expected);
  links.receive_gradient(got.data(), got.size(), 3);
  bytes.assign(int4.encoded_bytes(1000), 0);
  int4.encode(gradient.data(), 1000, bytes.data());
  int4.decode(bytes.data(), 1000, expected.data());
  EXPECT_EQ(got, expected);
}

TEST(EncodedLinks, Fp32PassesThroughUnchanged) {
  auto inner = std::make_unique<Loopback>();
  Loopback* wire = inner.get();
  EncodedPipelineLinks links(std::move(inner), WireCodec{}, WireCodec{});
  const std::vector<float> x = {1.5f, -2.0f, 3e-30f};
  links.send_activation(x.data(), x.size(), 0);
  EXPECT_EQ(wire->wire[std::make_pair(0, false)], x);
  std::vector<float> got(3);
  links.receive_activation(got.data(), 3, 0);
  EXPECT_EQ(got, x);
}

}  // namespace
}  // namespace geotrain::runtime
