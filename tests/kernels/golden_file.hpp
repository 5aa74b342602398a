// Reader for the golden tensor files written by tests/golden/make_golden.py
// (the format is documented in that script's docstring).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace geotrain::test {

struct GoldenTensor {
  std::vector<std::size_t> shape;  // empty for a scalar
  std::vector<float> floats;       // dtype float32
  std::vector<int> ints;           // dtype int32
  std::size_t size() const;        // number of elements
};

class GoldenCase {
 public:
  // Reads tests/golden/data/<name>.bin; throws std::runtime_error naming the
  // file on a missing file, a bad magic or a truncated tensor.
  static GoldenCase load(const std::string& name);

  // Throw std::runtime_error naming the case and tensor when it is absent
  // or of the other dtype.
  const std::vector<float>& floats(const std::string& tensor) const;
  const std::vector<int>& ints(const std::string& tensor) const;
  float scalar(const std::string& tensor) const;
  const std::vector<std::size_t>& shape(const std::string& tensor) const;
  const std::string& name() const { return name_; }

 private:
  const GoldenTensor& find(const std::string& tensor) const;
  std::string name_;
  std::map<std::string, GoldenTensor> tensors_;
};

}  // namespace geotrain::test
