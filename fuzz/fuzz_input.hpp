// Reads structured choices out of a fuzz input, in the spirit of libFuzzer's
// FuzzedDataProvider. Our own because the harnesses also build with GCC (the
// *_replay tests of the release and asan presets), where clang's
// <fuzzer/FuzzedDataProvider.h> is not on the include path. An exhausted
// input yields zeros, so every input decodes to some sequence of choices.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace geotrain::fuzz {

class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::size_t remaining() const { return size_ - at_; }

  std::uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }

  bool flag() { return byte() & 1; }

  // Uniform enough in [lo, hi]; uses as few bytes as the range needs.
  template <typename T>
  T in_range(T lo, T hi) {
    static_assert(std::is_integral_v<T>);
    using U = std::make_unsigned_t<T>;
    const U span = static_cast<U>(static_cast<U>(hi) - static_cast<U>(lo));
    U value = 0;
    for (std::size_t shift = 0; shift < 8 * sizeof(U) && (span >> shift) != 0; shift += 8) {
      value = static_cast<U>((value << 8) | byte());
    }
    if (span != static_cast<U>(-1)) value %= static_cast<U>(span + 1);
    return static_cast<T>(static_cast<U>(lo) + value);
  }

  template <typename T>
  T raw() {
    static_assert(std::is_trivially_copyable_v<T>);
    unsigned char bytes[sizeof(T)] = {};
    for (unsigned char& b : bytes) b = byte();
    T value;
    std::memcpy(&value, bytes, sizeof value);
    return value;
  }

  // One of `options`, by index.
  template <typename T, std::size_t N>
  const T& pick(const T (&options)[N]) {
    return options[in_range<std::size_t>(0, N - 1)];
  }

  std::vector<std::uint8_t> bytes(std::size_t max_length) {
    const std::size_t length = std::min(in_range<std::size_t>(0, max_length), remaining());
    std::vector<std::uint8_t> out(data_ + at_, data_ + at_ + length);
    at_ += length;
    return out;
  }

  std::string text(std::size_t max_length) {
    const std::vector<std::uint8_t> b = bytes(max_length);
    return std::string(b.begin(), b.end());
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

}  // namespace geotrain::fuzz
