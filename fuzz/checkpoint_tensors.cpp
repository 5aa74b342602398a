// The tensor message that stages send to the checkpoint writer
// (io/checkpoint.hpp, deserialize_tensors). Invariants of an accepted one:
//  - every tensor has a name, rank 1..4, dimensions >= 1, its value holds
//    exactly product(shape) floats (computed without overflow) and its two
//    moments as many or none;
//  - serialize_tensors gives back the same bytes.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "geotrain/io/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::uint8_t> bytes(data, data + size);
  std::vector<geotrain::io::CheckpointTensor> tensors;
  try {
    tensors = geotrain::io::deserialize_tensors(bytes);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  for (const auto& t : tensors) {
    FUZZ_CHECK(!t.name.empty(), "empty name");
    FUZZ_CHECK(!t.shape.empty() && t.shape.size() <= 4, t.name + ": rank " + std::to_string(t.shape.size()));
    std::uint64_t elements = 1;
    bool overflow = false;
    std::string shape;
    for (int d : t.shape) {
      FUZZ_CHECK(d >= 1, t.name + ": dimension " + std::to_string(d));
      overflow |= __builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements);
      shape += (shape.empty() ? "" : " x ") + std::to_string(d);
    }
    const bool moments = !t.first_moment.empty();
    for (const auto* values : {&t.value, &t.first_moment, &t.second_moment}) {
      if (values != &t.value && !moments) {
        FUZZ_CHECK(values->empty(), t.name + ": one moment without the other");
        continue;
      }
      FUZZ_CHECK(!overflow && values->size() == elements,
                 t.name + ": " + std::to_string(values->size()) + " floats for a shape of " + shape);
    }
  }
  FUZZ_CHECK(geotrain::io::serialize_tensors(tensors) == bytes, "serialize(deserialize(bytes)) != bytes");
  return 0;
}
