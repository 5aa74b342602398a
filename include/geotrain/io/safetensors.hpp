// Safetensors files (the Hugging Face weight format), read and written
// without the Python package:
//   8 bytes   little-endian uint64 N: the header's length
//   N bytes   JSON: {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//                    "__metadata__": {"<key>": "<text>", ...}}   (metadata optional)
//   the rest  raw little-endian tensor bytes; offsets are relative to this area
// Read: F32, F16 and BF16, every value widened to float. Written: F32.
#pragma once
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace geotrain::io {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;               // "F32", "F16", "BF16" (others are listed, but not readable)
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // byte offsets into the data area
  std::uint64_t element_count() const;
};

// An open file whose header has been read and checked: every entry's
// offsets lie inside the file and span exactly its elements at its dtype's
// width (for the three readable dtypes). Tensors are read one at a time, so
// a file larger than memory can be converted tensor by tensor.
class SafetensorsReader {
 public:
  // Throws InputError "<path>: <what>" for a missing file, a bad header or
  // an entry whose offsets do not fit.
  explicit SafetensorsReader(const std::string& path);

  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

  // The tensor's values as floats, row-major. Throws InputError naming the
  // file and tensor for a dtype other than F32, F16, BF16.
  std::vector<float> read_floats(const SafetensorsEntry& entry);

 private:
  std::string path_;
  std::ifstream in_;
  std::uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;  // product(shape) floats
};

// Writes `tensors` as F32 in the given order, with `metadata` (Hugging Face
// reads a file only when it says {"format": "pt"}). Throws RunError naming
// the path when it cannot write.
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

// IEEE half and bfloat16 bit patterns to float (exact: both widen losslessly).
float half_to_float(std::uint16_t bits);
float bfloat16_to_float(std::uint16_t bits);

}  // namespace geotrain::io
