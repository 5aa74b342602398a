#include "geotrain/runtime/wire_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>


namespace geotrain::runtime {
namespace {

int largest_code(WireFormat format) { return format == WireFormat::int8 ? 127 : 7; }

std::size_t group_count(std::size_t count, int group_size) { return wire_group_count(count, group_size); }

// Round half to even, as the hardware does: the same code on every machine.
int code_of(float value, float inverse_scale, int qmax) {
  const float scaled = std::nearbyint(value * inverse_scale);
  return static_cast<int>(std::clamp(scaled, static_cast<float>(-qmax), static_cast<float>(qmax)));
}

void encode_groups(const WireCodec& c, const float* x, std::size_t n, std::uint8_t* out) {
  const int qmax = largest_code(c.format);
  const std::size_t groups = group_count(n, c.group_size);
  auto* scales = reinterpret_cast<float*>(out);  // the buffer comes from std::vector<uint8_t>: aligned
  std::uint8_t* codes = out + groups * sizeof(float);
  if (c.format == WireFormat::int4) std::memset(codes, 0, (n + 1) / 2);
  for (std::size_t g = 0; g < groups; ++g) {
    const std::size_t begin = g * c.group_size, end = std::min(n, begin + c.group_size);
    float largest = 0;
    for (std::size_t i = begin; i < end; ++i) largest = std::max(largest, std::fabs(x[i]));
    // A group of non-finite values would poison every step after it: the
    // caller checks the loss; here the scale stays finite.
    const float scale = std::isfinite(largest) && largest > 0 ? largest / static_cast<float>(qmax) : 0.0f;
    const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
    std::memcpy(&scales[g], &scale, sizeof scale);
    for (std::size_t i = begin; i < end; ++i) {
      const int code = code_of(std::isfinite(x[i]) ? x[i] : 0.0f, inverse, qmax);
      if (c.format == WireFormat::int8) {
        codes[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(code));
      } else {
        codes[i / 2] |= static_cast<std::uint8_t>((code & 0xF) << (i % 2 ? 4 : 0));
      }
    }
  }
}

void decode_groups(const WireCodec& c, const std::uint8_t* in, std::size_t n, float* x) {
  const std::size_t groups = group_count(n, c.group_size);
  const std::uint8_t* codes = in + groups * sizeof(float);
  for (std::size_t g = 0; g < groups; ++g) {
    float scale;
    std::memcpy(&scale, in + g * sizeof(float), sizeof scale);
    const std::size_t begin = g * c.group_size, end = std::min(n, begin + c.group_size);
    for (std::size_t i = begin; i < end; ++i) {
      int code;
      if (c.format == WireFormat::int8) {
        code = static_cast<std::int8_t>(codes[i]);
      } else {
        const int nibble = (codes[i / 2] >> (i % 2 ? 4 : 0)) & 0xF;
        code = nibble >= 8 ? nibble - 16 : nibble;  // sign-extend the 4 bits
      }
      x[i] = static_cast<float>(code) * scale;
    }
  }
}

struct IndexValue {
  std::uint32_t index;
  float value;
};
static_assert(sizeof(IndexValue) == kTopkPairBytes, "a top-k pair is the size wire_encoded_bytes counts");

void encode_topk(const WireCodec& c, const float* x, std::size_t n, std::uint8_t* out) {
  const std::size_t k = c.topk_count(n);
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  auto magnitude = [&](std::uint32_t i) { return std::isfinite(x[i]) ? std::fabs(x[i]) : 0.0f; };
  // Ties go to the lower index, so the choice is the same on every machine.
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) {
                     return magnitude(a) > magnitude(b) || (magnitude(a) == magnitude(b) && a < b);
                   });
  std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
  for (std::size_t j = 0; j < k; ++j) {
    const IndexValue pair{order[j], std::isfinite(x[order[j]]) ? x[order[j]] : 0.0f};
    std::memcpy(out + j * sizeof pair, &pair, sizeof pair);
  }
}

void decode_topk(const WireCodec& c, const std::uint8_t* in, std::size_t n, float* x) {
  std::fill(x, x + n, 0.0f);
  for (std::size_t j = 0; j < c.topk_count(n); ++j) {
    IndexValue pair;
    std::memcpy(&pair, in + j * sizeof pair, sizeof pair);
    if (pair.index >= n) throw std::invalid_argument("top-k decode: index " + std::to_string(pair.index) + " >= " + std::to_string(n));
    x[pair.index] = pair.value;
  }
}

}  // namespace

void WireCodec::encode(const float* values, std::size_t n, std::uint8_t* out) const {
  if (format == WireFormat::fp32) std::memcpy(out, values, n * sizeof(float));
  else if (format == WireFormat::topk) encode_topk(*this, values, n, out);
  else encode_groups(*this, values, n, out);
}

void WireCodec::decode(const std::uint8_t* in, std::size_t n, float* values) const {
  if (format == WireFormat::fp32) std::memcpy(values, in, n * sizeof(float));
  else if (format == WireFormat::topk) decode_topk(*this, in, n, values);
  else decode_groups(*this, in, n, values);
}

void ErrorFeedback::encode(const float* values, std::size_t n, std::uint8_t* out, float* decoded) {
  residual_.resize(n, 0.0f);
  corrected_.resize(n);
  for (std::size_t i = 0; i < n; ++i) corrected_[i] = values[i] + residual_[i];
  codec_.encode(corrected_.data(), n, out);
  codec_.decode(out, n, decoded);
  for (std::size_t i = 0; i < n; ++i) residual_[i] = corrected_[i] - decoded[i];
}

}  // namespace geotrain::runtime
