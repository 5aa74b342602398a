// llm.c / nanoGPT token shards and the seeded batch sampler (format and
// sampling rules: include/geotrain/io/token_shard.hpp). Every problem with a
// file is one InputError line "<path>: <field>: <what> (<hint>)".
#include "geotrain/io/token_shard.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "geotrain/common/errors.hpp"

namespace geotrain::io {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& field, const std::string& what,
                       const std::string& hint = {}) {
  std::string message = path + ": " + field + ": " + what;
  if (!hint.empty()) message += " (" + hint + ")";
  throw InputError(message);
}

std::int32_t load_i32(const unsigned char* p) {
  const std::uint32_t u = static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
                          (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
  return static_cast<std::int32_t>(u);
}

void store_i32(unsigned char* p, std::int32_t value) {
  const auto u = static_cast<std::uint32_t>(value);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(u >> (8 * i));
}

std::int32_t byte_swapped(std::int32_t value) {
  const auto u = static_cast<std::uint32_t>(value);
  return static_cast<std::int32_t>((u >> 24) | ((u >> 8) & 0xFF00u) | ((u << 8) & 0xFF0000u) | (u << 24));
}

const char* const kFormatHint =
    "an llm.c/nanoGPT token shard starts with a 1024-byte header of 256 little-endian int32: "
    "magic 20240520, version 1, token count";

// --- deterministic randomness (same on every platform) ----------------------

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t epoch_seed(std::uint64_t seed, std::int64_t epoch) {
  std::uint64_t state = seed;
  const std::uint64_t a = splitmix64(state);
  state = a ^ static_cast<std::uint64_t>(epoch);
  return splitmix64(state);
}

// Uniform in [0, n), n >= 1, without modulo bias.
std::uint64_t below(std::uint64_t& state, std::uint64_t n) {
  const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() -
                              std::numeric_limits<std::uint64_t>::max() % n;
  for (;;) {
    const std::uint64_t x = splitmix64(state);
    if (x < limit) return x % n;
  }
}

void check_shape(int B, int T) {
  if (B < 1) throw std::invalid_argument("token batch: B must be >= 1, got " + std::to_string(B));
  if (T < 1) throw std::invalid_argument("token batch: T must be >= 1, got " + std::to_string(T));
}

// Copies window `w` (tokens w*T .. w*T+T) into row `b` of a batch.
void copy_window(const std::vector<std::uint16_t>& tokens, std::size_t w, int T, int b,
                 std::vector<int>& inputs, std::vector<int>& targets) {
  const std::size_t start = w * static_cast<std::size_t>(T);
  const std::size_t row = static_cast<std::size_t>(b) * static_cast<std::size_t>(T);
  for (int t = 0; t < T; ++t) {
    inputs[row + t] = tokens[start + t];
    targets[row + t] = tokens[start + t + 1];
  }
}

std::string too_small(std::size_t tokens, std::size_t windows, int T, long long sequences) {
  return std::to_string(tokens) + " tokens hold " + std::to_string(windows) + " sequences of " +
         std::to_string(T) + "+1 tokens, fewer than one global batch of " + std::to_string(sequences);
}

}  // namespace

// ---------------------------------------------------------------------------
// Reading and writing shards.

std::vector<std::uint16_t> read_token_shard(const std::string& path, int vocab_size) {
  if (vocab_size < 1 || vocab_size > 65536) {
    throw std::invalid_argument("read_token_shard: vocab_size must be in 1..65536, got " +
                                std::to_string(vocab_size));
  }
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) fail(path, "file", "cannot open (it is a directory)");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "file", "cannot open", "missing or unreadable; make it with inputs/data/make_corpus.sh or llm.c's data scripts");
  in.seekg(0, std::ios::end);
  const std::streamoff size_signed = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size_signed < 0) fail(path, "file", "cannot determine its size");
  const auto size = static_cast<std::uintmax_t>(size_signed);

  if (size == 0) fail(path, "header", "file is empty", kFormatHint);
  if (size < kShardHeaderBytes) {
    fail(path, "header", "file has " + std::to_string(size) + " bytes, fewer than the 1024-byte header",
         "truncated, or not a token shard");
  }
  unsigned char header[kShardHeaderBytes];
  if (!in.read(reinterpret_cast<char*>(header), kShardHeaderBytes)) fail(path, "header", "read failed");

  const std::int32_t magic = load_i32(header);
  if (magic != kShardMagic) {
    const std::string hint = byte_swapped(magic) == kShardMagic
                                 ? "the header is big-endian; shards are little-endian"
                                 : "not an llm.c/nanoGPT token shard, whose first 4 bytes are the little-endian "
                                   "int32 20240520";
    fail(path, "header[0] (magic)", "expected 20240520, got " + std::to_string(magic), hint);
  }
  const std::int32_t version = load_i32(header + 4);
  if (version != kShardVersion) {
    const std::string hint = version == 2
                                 ? "version 2 stores uint32 tokens (vocabularies over 65536); only version 1, "
                                   "uint16 tokens, is supported"
                                 : "only version 1 (uint16 tokens) is supported";
    fail(path, "header[1] (version)", "expected 1, got " + std::to_string(version), hint);
  }
  const std::int32_t count = load_i32(header + 8);
  if (count <= 0) {
    fail(path, "header[2] (token count)", "must be > 0, got " + std::to_string(count),
         "a shard needs at least one token");
  }
  const std::uintmax_t expected = kShardHeaderBytes + 2 * static_cast<std::uintmax_t>(count);
  if (size != expected) {
    fail(path, "tokens",
         "file has " + std::to_string(size) + " bytes, but the header's token count " + std::to_string(count) +
             " needs 1024 + 2*" + std::to_string(count) + " = " + std::to_string(expected),
         size < expected ? "truncated file" : "trailing bytes after the tokens, or a wrong token count");
  }

  std::vector<unsigned char> raw(2 * static_cast<std::size_t>(count));
  if (!in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()))) {
    fail(path, "tokens", "read failed");
  }
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8));
    if (tokens[i] >= vocab_size) {
      fail(path, "tokens[" + std::to_string(i) + "]",
           "token id " + std::to_string(tokens[i]) + " >= vocab size " + std::to_string(vocab_size),
           "the shard was made with a different tokenizer than the model's vocabulary");
    }
  }
  return tokens;
}

void write_token_shard(const std::string& path, std::span<const std::uint16_t> tokens) {
  if (tokens.empty()) throw std::invalid_argument("write_token_shard: " + path + ": no tokens");
  if (tokens.size() > static_cast<std::size_t>(INT32_MAX)) {
    throw std::invalid_argument("write_token_shard: " + path + ": more than 2^31-1 tokens");
  }
  std::vector<unsigned char> bytes(kShardHeaderBytes + 2 * tokens.size(), 0);
  store_i32(bytes.data(), kShardMagic);
  store_i32(bytes.data() + 4, kShardVersion);
  store_i32(bytes.data() + 8, static_cast<std::int32_t>(tokens.size()));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    bytes[kShardHeaderBytes + 2 * i] = static_cast<unsigned char>(tokens[i] & 0xFF);
    bytes[kShardHeaderBytes + 2 * i + 1] = static_cast<unsigned char>(tokens[i] >> 8);
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw RunError(path + ": cannot open for writing");
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw RunError(path + ": write failed (disk full?)");
}

// ---------------------------------------------------------------------------
// TokenDataset.

TokenDataset::TokenDataset(std::vector<std::uint16_t> train, std::vector<std::uint16_t> validation,
                           std::uint64_t seed, std::string train_name, std::string validation_name)
    : train_(std::move(train)),
      validation_(std::move(validation)),
      train_name_(std::move(train_name)),
      validation_name_(std::move(validation_name)),
      seed_(seed) {}

TokenDataset TokenDataset::from_shards(const std::string& train_path, const std::string& validation_path,
                                       int vocab_size, std::uint64_t seed) {
  return TokenDataset(read_token_shard(train_path, vocab_size), read_token_shard(validation_path, vocab_size),
                      seed, train_path, validation_path);
}

TokenDataset TokenDataset::from_split(const std::string& path, int vocab_size, double validation_fraction,
                                      std::uint64_t seed) {
  if (!(validation_fraction > 0.0 && validation_fraction < 1.0)) {
    throw std::invalid_argument("TokenDataset::from_split: validation_fraction must be in (0, 1), got " +
                                std::to_string(validation_fraction));
  }
  std::vector<std::uint16_t> tokens = read_token_shard(path, vocab_size);
  const auto validation_count =
      static_cast<std::size_t>(std::llround(validation_fraction * static_cast<double>(tokens.size())));
  if (validation_count < 2 || tokens.size() - validation_count < 2) {
    fail(path, "tokens",
         std::to_string(tokens.size()) + " tokens are too few to split " + std::to_string(validation_fraction) +
             " off for validation",
         "each part needs at least 2 tokens");
  }
  const auto cut = static_cast<std::ptrdiff_t>(tokens.size() - validation_count);
  std::vector<std::uint16_t> validation(tokens.begin() + cut, tokens.end());
  tokens.resize(static_cast<std::size_t>(cut));
  return TokenDataset(std::move(tokens), std::move(validation), seed, path + " (training part)",
                      path + " (validation tail)");
}

void TokenDataset::set_replica(int replica, int replicas) {
  if (replicas < 1 || replica < 0 || replica >= replicas) {
    throw std::invalid_argument("TokenDataset::set_replica: need 0 <= replica < replicas, got replica " +
                                std::to_string(replica) + " of " + std::to_string(replicas));
  }
  replica_ = replica;
  replicas_ = replicas;
}

std::size_t TokenDataset::window_count(std::size_t tokens, int T) {
  if (T < 1 || tokens < 2) return 0;
  return (tokens - 1) / static_cast<std::size_t>(T);
}

void TokenDataset::build_order(int T) {
  if (order_T_ == T && order_epoch_ == epoch_) return;
  const std::size_t n = window_count(train_.size(), T);
  if (n > std::numeric_limits<std::uint32_t>::max()) {
    fail(train_name_, "tokens", "more than 2^32 sequences of " + std::to_string(T) + "+1 tokens",
         "use a longer sequence length or split the data into shards");
  }
  order_.resize(n);
  for (std::size_t i = 0; i < n; ++i) order_[i] = static_cast<std::uint32_t>(i);
  std::uint64_t state = epoch_seed(seed_, epoch_);
  for (std::size_t i = n; i > 1; --i) {  // Fisher-Yates
    const std::size_t j = static_cast<std::size_t>(below(state, i));
    std::swap(order_[i - 1], order_[j]);
  }
  order_T_ = T;
  order_epoch_ = epoch_;
}

void TokenDataset::next_batch(int B, int T, std::vector<int>& inputs, std::vector<int>& targets) {
  check_shape(B, T);
  const std::size_t windows = window_count(train_.size(), T);
  const long long global = static_cast<long long>(B) * replicas_;
  if (windows < static_cast<std::size_t>(global)) {
    fail(train_name_, "tokens", too_small(train_.size(), windows, T, global),
         "use fewer or shorter sequences per batch, or more data");
  }
  if (position_ + global > static_cast<std::int64_t>(windows)) {  // epoch done: reshuffle
    ++epoch_;
    position_ = 0;
  }
  build_order(T);
  inputs.resize(static_cast<std::size_t>(B) * static_cast<std::size_t>(T));
  targets.resize(inputs.size());
  const std::int64_t first = position_ + static_cast<std::int64_t>(replica_) * B;
  for (int b = 0; b < B; ++b) {
    copy_window(train_, order_[static_cast<std::size_t>(first + b)], T, b, inputs, targets);
  }
  position_ += global;
}

std::vector<TokenBatch> TokenDataset::validation_batches(int B, int T, int max_batches) const {
  check_shape(B, T);
  const std::size_t windows = window_count(validation_.size(), T);
  const std::size_t global = static_cast<std::size_t>(B) * static_cast<std::size_t>(replicas_);
  if (windows < global) {
    fail(validation_name_, "tokens", too_small(validation_.size(), windows, T, static_cast<long long>(global)),
         "use fewer or shorter sequences per batch, or more validation data");
  }
  std::size_t count = windows / global;
  if (max_batches >= 1) count = std::min(count, static_cast<std::size_t>(max_batches));
  std::vector<TokenBatch> batches(count);
  for (std::size_t i = 0; i < count; ++i) {
    TokenBatch& batch = batches[i];
    batch.inputs.resize(static_cast<std::size_t>(B) * static_cast<std::size_t>(T));
    batch.targets.resize(batch.inputs.size());
    const std::size_t first = i * global + static_cast<std::size_t>(replica_) * static_cast<std::size_t>(B);
    for (int b = 0; b < B; ++b) copy_window(validation_, first + static_cast<std::size_t>(b), T, b, batch.inputs, batch.targets);
  }
  return batches;
}

SamplerState TokenDataset::state() const { return SamplerState{seed_, epoch_, position_}; }

void TokenDataset::restore(const SamplerState& state) {
  if (state.epoch < 0 || state.position < 0) {
    throw std::invalid_argument("TokenDataset::restore: negative epoch or position (epoch " +
                                std::to_string(state.epoch) + ", position " + std::to_string(state.position) + ")");
  }
  seed_ = state.seed;
  epoch_ = state.epoch;
  position_ = state.position;
  order_epoch_ = -1;  // rebuild the permutation for the restored epoch
}

}  // namespace geotrain::io
