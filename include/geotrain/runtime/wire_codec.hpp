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

namespace geotrain::runtime {

struct WireCodec {
  WireFormat format = WireFormat::fp32;
  int group_size = 64;          // int8 / int4: values per scale
  double topk_fraction = 0.01;  // topk: the share of values sent

  // Bytes of the encoding of `count` values (a function of count alone, so
  // that receivers size their buffers without a header).
  std::size_t encoded_bytes(std::size_t count) const;
  void encode(const float* values, std::size_t count, std::uint8_t* out) const;
  // Overwrites values[0, count) with the decoded tensor.
  void decode(const std::uint8_t* in, std::size_t count, float* values) const;
  std::size_t topk_count(std::size_t count) const;
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
