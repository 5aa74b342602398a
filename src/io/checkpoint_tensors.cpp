// Checkpoint tensors as one message (serialize_tensors, deserialize_tensors):
// what ranks send each other when one of them writes for several.
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include "geotrain/io/checkpoint.hpp"

namespace geotrain::io {
namespace {

template <typename T>
void put(std::vector<std::uint8_t>& out, const T& value) {
  const std::size_t at = out.size();
  out.resize(at + sizeof value);
  std::memcpy(out.data() + at, &value, sizeof value);
}

// Reads the message front to back; std::invalid_argument past its end.
class Reader {
 public:
  explicit Reader(const std::vector<std::uint8_t>& bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    T value;
    take(&value, sizeof value);
    return value;
  }
  void take(void* out, std::size_t size) {
    if (size > bytes_.size() - at_) throw std::invalid_argument("checkpoint tensors: message truncated");
    std::memcpy(out, bytes_.data() + at_, size);
    at_ += size;
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  const std::vector<std::uint8_t>& bytes_;
  std::size_t at_ = 0;
};

}  // namespace

std::vector<std::uint8_t> serialize_tensors(const std::vector<CheckpointTensor>& tensors) {
  std::vector<std::uint8_t> out;
  put(out, static_cast<std::uint32_t>(tensors.size()));
  for (const CheckpointTensor& t : tensors) {
    put(out, static_cast<std::uint32_t>(t.name.size()));
    out.insert(out.end(), t.name.begin(), t.name.end());
    put(out, static_cast<std::uint32_t>(t.shape.size()));
    for (int d : t.shape) put(out, static_cast<std::int32_t>(d));
    const bool moments = !t.first_moments().empty();
    if (moments != !t.second_moments().empty()) throw std::invalid_argument("serialize_tensors: " + t.name + ": one moment");
    put(out, static_cast<std::uint8_t>(moments ? 1 : 0));
    for (const std::span<const float> data : {t.values(), t.first_moments(), t.second_moments()}) {
      const auto* bytes = reinterpret_cast<const std::uint8_t*>(data.data());
      out.insert(out.end(), bytes, bytes + data.size() * sizeof(float));
    }
  }
  return out;
}

std::vector<CheckpointTensor> deserialize_tensors(const std::vector<std::uint8_t>& bytes) {
  Reader in(bytes);
  const std::uint32_t count = in.get<std::uint32_t>();
  // The smallest tensor (1-byte name, rank 1, no moments, one float) takes 18
  // bytes: a count the message cannot hold is refused before allocating.
  constexpr std::size_t kSmallestTensorBytes = 4 + 1 + 4 + 4 + 1 + sizeof(float);
  if (count > 1000000 || count > (bytes.size() - sizeof count) / kSmallestTensorBytes) {
    throw std::invalid_argument("checkpoint tensors: implausible tensor count");
  }
  std::vector<CheckpointTensor> tensors(count);
  for (CheckpointTensor& t : tensors) {
    const std::uint32_t name_length = in.get<std::uint32_t>();
    if (name_length == 0 || name_length > 4096) throw std::invalid_argument("checkpoint tensors: bad name length");
    t.name.resize(name_length);
    in.take(t.name.data(), name_length);
    const std::uint32_t rank = in.get<std::uint32_t>();
    if (rank < 1 || rank > 4) throw std::invalid_argument("checkpoint tensors: bad rank");
    std::size_t n = 1;
    for (std::uint32_t i = 0; i < rank; ++i) {
      const std::int32_t d = in.get<std::int32_t>();
      if (d < 1) throw std::invalid_argument("checkpoint tensors: bad dimension");
      t.shape.push_back(d);
      // The floats must fit in the message; checked factor by factor, so that
      // the product cannot wrap around (to 0 floats for a 2^64-element shape).
      if (n > bytes.size() / static_cast<std::size_t>(d)) {
        throw std::invalid_argument("checkpoint tensors: message truncated");
      }
      n *= static_cast<std::size_t>(d);
    }
    const std::uint8_t moments = in.get<std::uint8_t>();
    if (moments > 1) throw std::invalid_argument("checkpoint tensors: bad moments flag");
    for (auto* data : {&t.value, &t.first_moment, &t.second_moment}) {
      if (data != &t.value && moments == 0) continue;
      data->resize(n);
      in.take(data->data(), n * sizeof(float));
    }
  }
  if (!in.done()) throw std::invalid_argument("checkpoint tensors: trailing bytes");
  return tensors;
}

}  // namespace geotrain::io
