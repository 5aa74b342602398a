#include "geotrain/io/tokenizer.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/bpe_tokenizer.hpp"
#include "geotrain/io/byte_tokenizer.hpp"

namespace geotrain::io {
namespace {

class BytesTokenizer : public Tokenizer {
 public:
  std::vector<int> encode(std::string_view text) const override {
    const auto ids = ByteTokenizer::encode(text);
    return {ids.begin(), ids.end()};
  }
  std::string decode(std::span<const int> tokens) const override {
    try {
      return ByteTokenizer::decode(tokens);
    } catch (const std::invalid_argument& e) {
      throw InputError(e.what());
    }
  }
  int vocabulary() const override { return ByteTokenizer::kVocabSize; }
  std::string description() const override { return "byte"; }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<BytesTokenizer>(); }

std::string tokenizer_file_for_shard(const std::string& shard_path) {
  const auto file = std::filesystem::path(shard_path).parent_path() / "tokenizer.json";
  return std::filesystem::exists(file) ? file.string() : std::string();
}

std::unique_ptr<Tokenizer> tokenizer_from_text(const std::string& file_text, const std::string& origin) {
  if (file_text.empty()) return make_byte_tokenizer();
  return bpe_tokenizer_from_json(file_text, origin);
}

std::string tokenizer_text_for_shard(const std::string& shard_path) {
  const std::string file = tokenizer_file_for_shard(shard_path);
  if (file.empty()) return "";
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  tokenizer_from_text(text.str(), file);
  return text.str();
}

std::unique_ptr<Tokenizer> tokenizer_for_shard(const std::string& shard_path) {
  return tokenizer_from_text(tokenizer_text_for_shard(shard_path), tokenizer_file_for_shard(shard_path));
}

}  // namespace geotrain::io
