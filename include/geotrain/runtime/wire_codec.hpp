// Lossy encodings of float tensors for slow links (activations, their
// gradients, data-parallel gradients), and the error feedback that makes a
// lossy gradient exchange converge: what one step's encoding loses is added
// to the next step's tensor before it is encoded, so over many steps every
// value's total is transmitted.
//
// int8 / int4: symmetric quantisation in groups of `group_size` values, each
// group with one fp32 scale = max|x| / qmax (qmax 127 or 7); codes are
// round-to-nearest-even of x / scale, clamped; int4 packs two codes per byte
// (low nibble first). top-k: the k largest |x| as (uint32 index, fp32 value)
// pairs in ascending index order, the rest zero.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "geotrain/common/run_choices.hpp"
#include "geotrain/common/wire_bytes.hpp"

namespace geotrain::runtime {

struct WireCodec {
  WireFormat format = WireFormat::fp32;
  int group_size = kDefaultWireGroupSize;        // int8 / int4: values per scale
  double topk_fraction = kDefaultTopkFraction;   // topk: the share of values sent

  static WireCodec of(const WireEncoding& e) { return {e.format, e.group_size, e.topk_fraction}; }
  WireEncoding encoding() const { return {format, group_size, topk_fraction}; }
  // Bytes of the encoding of `count` values: wire_encoded_bytes
  // (common/wire_bytes.hpp), the formula the planner prices links with.
  std::size_t encoded_bytes(std::size_t count) const { return wire_encoded_bytes(encoding(), count); }
  void encode(const float* values, std::size_t count, std::uint8_t* out) const;
  // Overwrites values[0, count) with the decoded tensor.
  void decode(const std::uint8_t* in, std::size_t count, float* values) const;
  std::size_t topk_count(std::size_t count) const { return wire_topk_count(count, topk_fraction); }
};

// Encodes `values` + the residual of the previous calls and keeps, as the
// new residual, what the encoding lost. `decoded` receives what the receiver
// will decode (the encoding is deterministic, so the sender knows it).
class ErrorFeedback {
 public:
  explicit ErrorFeedback(WireCodec codec) : codec_(codec) {}
  void encode(const float* values, std::size_t count, std::uint8_t* out, float* decoded);
  const std::vector<float>& residual() const { return residual_; }
  void set_residual(std::vector<float> residual) { residual_ = std::move(residual); }
  const WireCodec& codec() const { return codec_; }

 private:
  WireCodec codec_;
  std::vector<float> residual_, corrected_;
};

}  // namespace geotrain::runtime
