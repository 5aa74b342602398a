// Model files (io/model_file.hpp): load_model_file on the input. Invariant:
// an accepted file describes a model the code can build: positive sizes up
// to 2^30, hidden divisible by heads, device speed in range, micro-batches
// that divide the global batch.
#include <cstdint>
#include <string>

#include "fuzz_support.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/io/model_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const geotrain::fuzz::ScratchFile file(std::span(data, size));
  geotrain::io::ModelFile loaded;
  try {
    loaded = geotrain::io::load_model_file(file.path());
  } catch (const geotrain::InputError&) {
    return 0;
  }
  const auto& m = loaded.model;
  const std::string shape = std::to_string(m.layers) + " layers, hidden " + std::to_string(m.hidden) + ", " +
                            std::to_string(m.heads) + " heads, vocabulary " + std::to_string(m.vocabulary) +
                            ", sequence " + std::to_string(m.sequence_length);
  for (int v : {m.layers, m.hidden, m.heads, m.vocabulary, m.sequence_length}) {
    FUZZ_CHECK(v >= 1 && v <= (1 << 30), shape);
  }
  FUZZ_CHECK(m.hidden % m.heads == 0, shape);
  if (loaded.device) {
    FUZZ_CHECK(loaded.device->peak_tflops > 0 && loaded.device->peak_tflops <= 1e6, "device.peak_tflops");
    FUZZ_CHECK(loaded.device->efficiency > 0 && loaded.device->efficiency <= 1, "device.efficiency");
  }
  if (loaded.batch) {
    FUZZ_CHECK(loaded.batch->global_batch_sequences >= 1 && loaded.batch->micro_batch_sequences >= 1, "batch");
    FUZZ_CHECK(loaded.batch->global_batch_sequences % loaded.batch->micro_batch_sequences == 0, "batch");
  }
  return 0;
}
