// Pipeline links that encode what they carry (compression.activations,
// compression.activation_gradients): activations and their gradients are
// quantised (runtime/wire_codec.hpp) before they leave and decoded where
// they arrive, around any host-memory PipelineLinks. The encoded bytes travel
// as the inner link's floats (a whole number of them, known to both ends from
// the tensor's size), so the inner link needs no change. No error feedback:
// an activation is used once (the AC-SGD paper's plain quantisation).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "geotrain/runtime/pipeline.hpp"
#include "geotrain/runtime/wire_codec.hpp"

namespace geotrain::runtime {

class EncodedPipelineLinks : public PipelineLinks {
 public:
  EncodedPipelineLinks(std::unique_ptr<PipelineLinks> inner, WireCodec activations, WireCodec gradients);
  void send_activation(const float* data, std::size_t count, int micro_batch) override;
  void receive_activation(float* data, std::size_t count, int micro_batch) override;
  void send_gradient(const float* data, std::size_t count, int micro_batch) override;
  void receive_gradient(float* data, std::size_t count, int micro_batch) override;
  void complete_sends() override { inner_->complete_sends(); }
  void wait_for_arrival(int micro_batch, bool gradient) override { inner_->wait_for_arrival(micro_batch, gradient); }
  int previous_peer() const override { return inner_->previous_peer(); }
  int next_peer() const override { return inner_->next_peer(); }

  // Floats that carry the encoding of `count` values.
  static std::size_t carrier_count(const WireCodec& codec, std::size_t count);

 private:
  const float* encoded(const WireCodec& codec, const float* data, std::size_t count);
  std::unique_ptr<PipelineLinks> inner_;
  WireCodec activations_, gradients_;
  std::vector<float> carrier_;   // the encoding, as floats; the inner link copies what it sends
  std::vector<float> received_;  // an arriving encoding (receives complete before they return)
};

}  // namespace geotrain::runtime
