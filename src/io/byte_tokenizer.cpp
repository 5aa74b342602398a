// Byte-level tokenizer (see include/geotrain/io/byte_tokenizer.hpp).
#include "geotrain/io/byte_tokenizer.hpp"

#include <stdexcept>

namespace geotrain::io {
namespace {

template <typename Id>
std::string decode_ids(std::span<const Id> tokens) {
  std::string text(tokens.size(), '\0');
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const long long id = tokens[i];
    if (id < 0 || id >= ByteTokenizer::kVocabSize) {
      throw std::invalid_argument("byte tokenizer: token " + std::to_string(i) + " is " + std::to_string(id) +
                                  ", outside 0..255");
    }
    text[i] = static_cast<char>(static_cast<unsigned char>(id));
  }
  return text;
}

}  // namespace

std::vector<std::uint16_t> ByteTokenizer::encode(std::string_view text) {
  std::vector<std::uint16_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string ByteTokenizer::decode(std::span<const std::uint16_t> tokens) { return decode_ids(tokens); }

std::string ByteTokenizer::decode(std::span<const int> tokens) { return decode_ids(tokens); }

}  // namespace geotrain::io
