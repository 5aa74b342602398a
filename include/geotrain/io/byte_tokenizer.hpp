// The byte-level tokenizer: token id = byte value, vocabulary 256. Any byte
// string (UTF-8 text included) encodes losslessly, so no training of the
// tokenizer and no vocabulary file are needed; the price is about four times
// more tokens per word than GPT-2's BPE, which is fine for the small shipped
// corpus (inputs/data). There is no end-of-text token: the corpus is one
// continuous text and sequences are cut from it at fixed offsets, so nothing
// marks document boundaries (a model with a larger vocabulary could add one).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace geotrain::io {

struct ByteTokenizer {
  static constexpr int kVocabSize = 256;

  // One token per byte of `text`, in order.
  static std::vector<std::uint16_t> encode(std::string_view text);
  // The bytes back. Throws std::invalid_argument naming the position of the
  // first id outside 0..255.
  static std::string decode(std::span<const std::uint16_t> tokens);
  static std::string decode(std::span<const int> tokens);
};

}  // namespace geotrain::io
