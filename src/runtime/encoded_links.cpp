#include "geotrain/runtime/encoded_links.hpp"

namespace geotrain::runtime {

EncodedPipelineLinks::EncodedPipelineLinks(std::unique_ptr<PipelineLinks> inner, WireCodec activations,
                                           WireCodec gradients)
    : inner_(std::move(inner)), activations_(activations), gradients_(gradients) {}

std::size_t EncodedPipelineLinks::carrier_count(const WireCodec& codec, std::size_t count) {
  return (codec.encoded_bytes(count) + sizeof(float) - 1) / sizeof(float);
}

const float* EncodedPipelineLinks::encoded(const WireCodec& codec, const float* data, std::size_t count) {
  if (codec.format == WireFormat::fp32) return data;
  carrier_.assign(carrier_count(codec, count), 0.0f);
  codec.encode(data, count, reinterpret_cast<std::uint8_t*>(carrier_.data()));
  return carrier_.data();
}

void EncodedPipelineLinks::send_activation(const float* data, std::size_t count, int micro_batch) {
  inner_->send_activation(encoded(activations_, data, count), carrier_count(activations_, count), micro_batch);
}

void EncodedPipelineLinks::send_gradient(const float* data, std::size_t count, int micro_batch) {
  inner_->send_gradient(encoded(gradients_, data, count), carrier_count(gradients_, count), micro_batch);
}

void EncodedPipelineLinks::receive_activation(float* data, std::size_t count, int micro_batch) {
  if (activations_.format == WireFormat::fp32) return inner_->receive_activation(data, count, micro_batch);
  received_.resize(carrier_count(activations_, count));
  inner_->receive_activation(received_.data(), received_.size(), micro_batch);
  activations_.decode(reinterpret_cast<const std::uint8_t*>(received_.data()), count, data);
}

void EncodedPipelineLinks::receive_gradient(float* data, std::size_t count, int micro_batch) {
  if (gradients_.format == WireFormat::fp32) return inner_->receive_gradient(data, count, micro_batch);
  received_.resize(carrier_count(gradients_, count));
  inner_->receive_gradient(received_.data(), received_.size(), micro_batch);
  gradients_.decode(reinterpret_cast<const std::uint8_t*>(received_.data()), count, data);
}

}  // namespace geotrain::runtime
