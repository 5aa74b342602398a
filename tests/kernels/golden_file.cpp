#include "golden_file.hpp"

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace geotrain::test {
namespace {

constexpr char kMagic[] = "GTGOLD01";
constexpr std::size_t kMagicSize = sizeof(kMagic) - 1;
constexpr std::uint32_t kFloat32 = 0;
constexpr std::uint32_t kInt32 = 1;

// Walks the file's bytes; every read checks the remaining length, so a
// truncated file is an error with its offset, never a read past the end.
class Reader {
 public:
  Reader(std::vector<char> bytes, std::string path) : bytes_(std::move(bytes)), path_(std::move(path)) {}

  void take(void* out, std::size_t count) {
    if (count > bytes_.size() - offset_) fail("truncated at byte " + std::to_string(offset_));
    std::memcpy(out, bytes_.data() + offset_, count);
    offset_ += count;
  }
  std::uint32_t u32() {
    std::uint32_t value = 0;  // the files are little-endian, as is every machine we build for
    take(&value, sizeof value);
    return value;
  }
  bool at_end() const { return offset_ == bytes_.size(); }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(path_ + ": " + what);
  }

 private:
  std::vector<char> bytes_;
  std::string path_;
  std::size_t offset_ = 0;
};

GoldenTensor read_tensor(Reader& in, std::string& name) {
  name.resize(in.u32());
  in.take(name.data(), name.size());
  const std::uint32_t dtype = in.u32();
  GoldenTensor tensor;
  tensor.shape.resize(in.u32());
  for (auto& extent : tensor.shape) extent = in.u32();
  const std::size_t count = tensor.size();
  if (dtype == kFloat32) {
    tensor.floats.resize(count);
    in.take(tensor.floats.data(), count * sizeof(float));
  } else if (dtype == kInt32) {
    tensor.ints.resize(count);
    in.take(tensor.ints.data(), count * sizeof(int));
  } else {
    in.fail("tensor '" + name + "': unknown dtype " + std::to_string(dtype));
  }
  return tensor;
}

}  // namespace

std::size_t GoldenTensor::size() const {
  std::size_t count = 1;
  for (std::size_t extent : shape) count *= extent;
  return count;
}

GoldenCase GoldenCase::load(const std::string& name) {
  const std::string path = std::string(GEOTRAIN_SOURCE_DIR) + "/tests/golden/data/" + name + ".bin";
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error(path + ": cannot open (run tests/golden/make_golden.py)");
  Reader in(std::vector<char>(std::istreambuf_iterator<char>(file), {}), path);
  char magic[kMagicSize];
  in.take(magic, kMagicSize);
  if (std::memcmp(magic, kMagic, kMagicSize) != 0) in.fail("not a golden tensor file (bad magic)");
  GoldenCase result;
  result.name_ = name;
  const std::uint32_t count = in.u32();
  for (std::uint32_t i = 0; i < count; ++i) {
    std::string tensor_name;
    GoldenTensor tensor = read_tensor(in, tensor_name);
    result.tensors_.emplace(std::move(tensor_name), std::move(tensor));
  }
  if (!in.at_end()) in.fail("trailing bytes after " + std::to_string(count) + " tensors");
  return result;
}

const GoldenTensor& GoldenCase::find(const std::string& tensor) const {
  const auto it = tensors_.find(tensor);
  if (it == tensors_.end()) throw std::runtime_error("golden case " + name_ + ": no tensor '" + tensor + "'");
  return it->second;
}

const std::vector<float>& GoldenCase::floats(const std::string& tensor) const {
  const GoldenTensor& t = find(tensor);
  if (t.floats.size() != t.size()) throw std::runtime_error("golden " + name_ + "." + tensor + ": not float32");
  return t.floats;
}

const std::vector<int>& GoldenCase::ints(const std::string& tensor) const {
  const GoldenTensor& t = find(tensor);
  if (t.ints.size() != t.size()) throw std::runtime_error("golden " + name_ + "." + tensor + ": not int32");
  return t.ints;
}

float GoldenCase::scalar(const std::string& tensor) const {
  const std::vector<float>& values = floats(tensor);
  if (values.size() != 1) throw std::runtime_error("golden " + name_ + "." + tensor + ": not a scalar");
  return values[0];
}

const std::vector<std::size_t>& GoldenCase::shape(const std::string& tensor) const { return find(tensor).shape; }

}  // namespace geotrain::test
