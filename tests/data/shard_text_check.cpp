// shard_text_check SHARD TEXT_FILE: the C++ side of the data-preparation
// round trip. Passes (exit 0) when the tokenizer that travels with SHARD (the
// tokenizer.json beside it, or the byte tokenizer) decodes the shard's tokens
// to exactly the bytes of TEXT_FILE and encodes those bytes to exactly the
// shard's tokens; otherwise prints where they first differ and exits 1.
// Bad input (unreadable shard, broken tokenizer file) exits 2.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/token_shard.hpp"
#include "geotrain/io/tokenizer.hpp"

namespace {

int first_difference(const std::string& a, const std::string& b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<int>(ia - a.begin());
}

int check(const std::string& shard, const std::string& text_file) {
  using namespace geotrain::io;
  const auto tokenizer = tokenizer_for_shard(shard);
  const std::vector<std::uint16_t> stored = read_token_shard(shard, 65536);
  const std::vector<int> tokens(stored.begin(), stored.end());
  std::ifstream in(text_file, std::ios::binary);
  if (!in) throw geotrain::InputError(text_file + ": cannot be read");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  const std::string decoded = tokenizer->decode(tokens);
  if (decoded != text) {
    const int at = first_difference(decoded, text);
    std::printf("FAIL: %s decoded with %s differs from %s at byte %d (decoded %zu bytes, text %zu)\n",
                shard.c_str(), tokenizer->description().c_str(), text_file.c_str(), at, decoded.size(), text.size());
    return 1;
  }
  const std::vector<int> encoded = tokenizer->encode(text);
  if (encoded != tokens) {
    const auto [it, unused] = std::mismatch(encoded.begin(), encoded.end(), tokens.begin(), tokens.end());
    const auto at = it - encoded.begin();
    std::printf("FAIL: %s encoded with %s differs from %s at token %td of %zu (shard has %zu)\n", text_file.c_str(),
                tokenizer->description().c_str(), shard.c_str(), at, encoded.size(), tokens.size());
    return 1;
  }
  std::printf("ok: %s: %zu tokens <-> %zu bytes of %s with %s\n", shard.c_str(), tokens.size(), text.size(),
              text_file.c_str(), tokenizer->description().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: shard_text_check SHARD TEXT_FILE\n");
    return 2;
  }
  try {
    return check(argv[1], argv[2]);
  } catch (const geotrain::InputError& e) {
    std::fprintf(stderr, "shard_text_check: %s\n", e.what());
    return 2;
  }
}
