// Checkpoint files (io/checkpoint.hpp): read_checkpoint_file on damaged
// copies of a small valid checkpoint. The input is not the file: it chooses
// a sequence of edits made through the HDF5 API (attributes deleted or
// rewritten with another type, shape or garbage, datasets deleted or
// replaced by others of another shape or type, by groups or links, groups
// replaced), then byte flips inside the tensors' raw data and a truncation.
//
// Why not raw bytes: the file format is libhdf5's, and feeding it random
// bytes mostly exercises libhdf5's own parser, whose malformed-file crashes
// (Debian's 1.10 has known ones) are not ours to fix. The edits reach what
// geotrain reads - every attribute and dataset it looks at, in every shape
// a writer could give them - plus the damage a crash or a bad disk leaves.
//
// Invariants of an accepted file: the current format version, non-negative step and
// sampler state, at least one tensor, unique names, rank 1..4, dimensions
// >= 1, and value and both moments of exactly product(shape) floats (no
// moments when weights_only); every float array one the writer wrote (a
// flipped byte is caught by the checksums); and it writes back and reads
// again unchanged.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint_edits.hpp"
#include "geotrain/common/errors.hpp"

namespace {

using namespace geotrain::fuzz;

std::vector<std::uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const std::vector<std::uint8_t>& base_file() {
  static const std::vector<std::uint8_t> bytes = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // failed edits are expected; their stacks are noise
    const ScratchFile file(std::string_view{});
    geotrain::io::write_checkpoint_file(file.path(), base_checkpoint());
    return file_bytes(file.path());
  }();
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  const ScratchFile file(base_file());
  damage(file.path(), in);
  geotrain::io::Checkpoint checkpoint;
  try {
    checkpoint = geotrain::io::read_checkpoint_file(file.path());
  } catch (const geotrain::InputError&) {
    return 0;
  }
  check_accepted(checkpoint);
  check_unchanged_floats(checkpoint, base_checkpoint());
  return 0;
}
