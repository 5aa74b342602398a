// Safetensors files (io/safetensors.hpp): SafetensorsReader on the input as
// a file. Invariants of an accepted file:
//  - the header length fits the file; every entry's data_offsets lie in the
//    data area, and for F32 / F16 / BF16 span exactly its elements;
//  - read_floats of an F32 entry gives its bytes unchanged, of F16 / BF16
//    product(shape) floats; any other dtype is refused with InputError;
//  - the readable entries written back (F32) read again bit for bit.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/io/safetensors.hpp"

namespace {

using geotrain::io::SafetensorsEntry;
using geotrain::io::SafetensorsReader;
using geotrain::io::SafetensorsTensor;

std::optional<SafetensorsReader> try_open(const std::string& path) {
  try {
    return std::optional<SafetensorsReader>(std::in_place, path);
  } catch (const geotrain::InputError&) {
    return std::nullopt;
  }
}

bool readable(const std::string& dtype) { return dtype == "F32" || dtype == "F16" || dtype == "BF16"; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const geotrain::fuzz::ScratchFile file(std::span(data, size));
  std::optional<SafetensorsReader> reader = try_open(file.path());
  if (!reader) return 0;
  FUZZ_CHECK(size >= 8, std::to_string(size) + " bytes");
  std::uint64_t header = 0;
  std::memcpy(&header, data, 8);  // the fuzz machines are little-endian, like the format
  FUZZ_CHECK(header <= size - 8, "header length " + std::to_string(header));
  const std::uint64_t data_bytes = size - 8 - header;
  std::vector<SafetensorsTensor> tensors;
  for (const SafetensorsEntry& e : reader->entries()) {
    FUZZ_CHECK(e.begin <= e.end && e.end <= data_bytes, e.name + ": offsets");
    if (!readable(e.dtype)) {
      bool refused = false;
      try {
        reader->read_floats(e);
      } catch (const geotrain::InputError&) {
        refused = true;
      }
      FUZZ_CHECK(refused, e.name + ": dtype " + e.dtype + " read");
      continue;
    }
    const std::vector<float> values = reader->read_floats(e);
    FUZZ_CHECK(values.size() == e.element_count(), e.name + ": " + std::to_string(values.size()) + " floats");
    if (e.dtype == "F32") {
      FUZZ_CHECK(values.empty() || std::memcmp(values.data(), data + 8 + header + e.begin, e.end - e.begin) == 0,
                 e.name + ": F32 bytes changed");
    }
    tensors.push_back({e.name, e.shape, values});
  }
  const geotrain::fuzz::ScratchFile again(std::string_view{});
  geotrain::io::write_safetensors(again.path(), tensors, reader->metadata());
  SafetensorsReader back(again.path());
  FUZZ_CHECK(back.entries().size() == tensors.size() && back.metadata() == reader->metadata(), "written back");
  for (const SafetensorsTensor& t : tensors) {
    const SafetensorsEntry* e = back.find(t.name);
    FUZZ_CHECK(e != nullptr && e->shape == t.shape, t.name + ": written back");
    const std::vector<float> values = back.read_floats(*e);
    FUZZ_CHECK(values.size() == t.values.size() &&
                   (values.empty() || std::memcmp(values.data(), t.values.data(), values.size() * 4) == 0),
               t.name + ": values written back");
  }
  return 0;
}
