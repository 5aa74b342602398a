// Bytes of a tensor on the wire under each encoding: the one formula that
// the runtime's codec (runtime/wire_codec.hpp) sizes its buffers with and
// that the planner's cost model and simulator price links with.
// Header-only and dependency-free, so the pure planning library can use it.
//
//   fp32  4 n
//   int8  4 ceil(n / g) + n             (one fp32 scale per group of g values)
//   int4  4 ceil(n / g) + ceil(n / 2)   (two codes per byte)
//   topk  8 k, k = clamp(ceil(f n), 1, n)   (uint32 index + fp32 value pairs)
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>

#include "geotrain/common/run_choices.hpp"

namespace geotrain {

inline constexpr int kDefaultWireGroupSize = 64;        // values per fp32 scale (int8 / int4)
inline constexpr double kDefaultTopkFraction = 0.01;    // share of the values top-k sends
inline constexpr std::size_t kTopkPairBytes = 8;        // uint32 index + fp32 value

// How one class of traffic is encoded: the format and its two parameters.
struct WireEncoding {
  WireFormat format = WireFormat::fp32;
  int group_size = kDefaultWireGroupSize;
  double topk_fraction = kDefaultTopkFraction;
};

inline std::size_t wire_group_count(std::size_t count, int group_size) {
  const auto g = static_cast<std::size_t>(group_size);
  return (count + g - 1) / g;
}

// Values top-k keeps of `count`: ceil(fraction * count), at least 1, at most count.
inline std::size_t wire_topk_count(std::size_t count, double fraction) {
  if (count == 0) return 0;
  const auto k = static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(count)));
  return std::clamp<std::size_t>(k, 1, count);
}

// Bytes of the encoding of `count` values (a function of count alone, so
// that receivers size their buffers without a header).
inline std::size_t wire_encoded_bytes(const WireEncoding& e, std::size_t count) {
  switch (e.format) {
    case WireFormat::fp32:
      return count * sizeof(float);
    case WireFormat::int8:
      return wire_group_count(count, e.group_size) * sizeof(float) + count;
    case WireFormat::int4:
      return wire_group_count(count, e.group_size) * sizeof(float) + (count + 1) / 2;
    case WireFormat::topk:
      return wire_topk_count(count, e.topk_fraction) * kTopkPairBytes;
  }
  return 0;
}

// The same for a planner's count, which may be a large non-integer (an
// average over stages): rounded to the nearest whole value first.
inline double wire_encoded_bytes(const WireEncoding& e, double count) {
  if (!(count > 0)) return 0.0;
  return static_cast<double>(wire_encoded_bytes(e, static_cast<std::size_t>(std::llround(count))));
}

// "int8 (group 64)", "topk (fraction 0.01)", "fp32".
inline std::string to_string(const WireEncoding& e) {
  char text[64];
  if (e.format == WireFormat::int8 || e.format == WireFormat::int4) {
    std::snprintf(text, sizeof text, "%s (group %d)", to_string(e.format).c_str(), e.group_size);
  } else if (e.format == WireFormat::topk) {
    std::snprintf(text, sizeof text, "topk (fraction %g)", e.topk_fraction);
  } else {
    return to_string(e.format);
  }
  return text;
}

}  // namespace geotrain
