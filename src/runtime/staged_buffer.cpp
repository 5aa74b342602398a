#include "geotrain/runtime/staged_buffer.hpp"

namespace geotrain::runtime {

const float* StagedBuffer::readable(const float* device, std::size_t count, bool transport_takes_device_memory) {
  pending_ = nullptr;
  if (transport_takes_device_memory) return device;
  host_.resize(count);
  backend_.download(host_.data(), device, count);
  return host_.data();
}

float* StagedBuffer::writable(float* device, std::size_t count, bool transport_takes_device_memory) {
  pending_ = nullptr;
  if (transport_takes_device_memory) return device;
  host_.resize(count);
  pending_ = device;
  return host_.data();
}

float* StagedBuffer::updatable(float* device, std::size_t count, bool transport_takes_device_memory) {
  float* target = writable(device, count, transport_takes_device_memory);
  if (!transport_takes_device_memory) backend_.download(target, device, count);
  return target;
}

void StagedBuffer::written() {
  if (pending_ == nullptr) return;
  backend_.upload(pending_, host_.data(), host_.size());
  pending_ = nullptr;
}

}  // namespace geotrain::runtime
