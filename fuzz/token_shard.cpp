// Token shards (io/token_shard.hpp): read_token_shard on the input as a
// file. Invariants:
//  - with the widest vocabulary (65536), acceptance means: header count N
//    > 0 and the file exactly 1024 + 2N bytes; the tokens are the file's;
//  - the vocabulary check is exact: the same file is accepted with
//    vocabulary max_token + 1 (same tokens) and rejected with max_token.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/io/token_shard.hpp"

namespace {

std::optional<std::vector<std::uint16_t>> try_read(const std::string& path, int vocabulary) {
  try {
    return geotrain::io::read_token_shard(path, vocabulary);
  } catch (const geotrain::InputError&) {
    return std::nullopt;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const geotrain::fuzz::ScratchFile file(std::span(data, size));
  const std::optional<std::vector<std::uint16_t>> tokens = try_read(file.path(), 65536);
  if (!tokens) return 0;

  FUZZ_CHECK(size >= geotrain::io::kShardHeaderBytes, std::to_string(size) + " bytes");
  std::int32_t magic = 0, version = 0, count = 0;
  std::memcpy(&magic, data, 4);  // the fuzz machines are little-endian, like the format
  std::memcpy(&version, data + 4, 4);
  std::memcpy(&count, data + 8, 4);
  FUZZ_CHECK(magic == geotrain::io::kShardMagic && version == geotrain::io::kShardVersion, "header");
  FUZZ_CHECK(count > 0 && tokens->size() == static_cast<std::size_t>(count), "count " + std::to_string(count));
  FUZZ_CHECK(size == geotrain::io::kShardHeaderBytes + 2 * tokens->size(), "size " + std::to_string(size));
  for (std::size_t i = 0; i < tokens->size(); ++i) {
    const std::uint8_t* at = data + geotrain::io::kShardHeaderBytes + 2 * i;
    FUZZ_CHECK((*tokens)[i] == (at[0] | (at[1] << 8)), "token " + std::to_string(i));
  }

  const int max_token = *std::max_element(tokens->begin(), tokens->end());
  const auto exact = try_read(file.path(), max_token + 1);
  FUZZ_CHECK(exact && *exact == *tokens, "rejected with vocabulary max + 1 = " + std::to_string(max_token + 1));
  if (max_token > 0) {
    FUZZ_CHECK(!try_read(file.path(), max_token), "accepted token " + std::to_string(max_token) +
                                                      " with vocabulary " + std::to_string(max_token));
  }
  return 0;
}
