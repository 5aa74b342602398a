// Token shards (llm.c/nanoGPT .bin), the shipped corpus, the byte tokenizer
// and the seeded batch sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "geotrain/io/byte_tokenizer.hpp"
#include "support/scratch_dir.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/io/token_shard.hpp"

namespace geotrain::io {
namespace {

namespace fs = std::filesystem;

std::string corpus_path(const std::string& name) {
  return std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/data/" + name;
}


std::vector<unsigned char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::int32_t int_at(const std::vector<unsigned char>& bytes, std::size_t index) {
  std::uint32_t u = 0;
  for (int i = 3; i >= 0; --i) u = (u << 8) | bytes.at(4 * index + static_cast<std::size_t>(i));
  return static_cast<std::int32_t>(u);
}

void put_int(std::vector<unsigned char>& bytes, std::size_t index, std::int32_t value) {
  const auto u = static_cast<std::uint32_t>(value);
  for (int i = 0; i < 4; ++i) bytes.at(4 * index + static_cast<std::size_t>(i)) = static_cast<unsigned char>(u >> (8 * i));
}

// A valid shard's bytes, built by hand (not with write_token_shard).
std::vector<unsigned char> shard_bytes(const std::vector<std::uint16_t>& tokens) {
  std::vector<unsigned char> bytes(1024 + 2 * tokens.size(), 0);
  put_int(bytes, 0, 20240520);
  put_int(bytes, 1, 1);
  put_int(bytes, 2, static_cast<std::int32_t>(tokens.size()));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    bytes[1024 + 2 * i] = static_cast<unsigned char>(tokens[i] & 0xFF);
    bytes[1024 + 2 * i + 1] = static_cast<unsigned char>(tokens[i] >> 8);
  }
  return bytes;
}

// Tokens equal to their position, so a window's first input names its start.
std::vector<std::uint16_t> counting_tokens(std::size_t n) {
  std::vector<std::uint16_t> tokens(n);
  for (std::size_t i = 0; i < n; ++i) tokens[i] = static_cast<std::uint16_t>(i);
  return tokens;
}

// The window starts (first input of each row) of one batch.
std::vector<int> row_starts(const std::vector<int>& inputs, int B, int T) {
  std::vector<int> starts;
  for (int b = 0; b < B; ++b) starts.push_back(inputs[static_cast<std::size_t>(b * T)]);
  return starts;
}

std::vector<std::vector<int>> take_batches(TokenDataset& data, int count, int B, int T) {
  std::vector<std::vector<int>> out;
  std::vector<int> inputs, targets;
  for (int i = 0; i < count; ++i) {
    data.next_batch(B, T, inputs, targets);
    out.push_back(inputs);
    out.push_back(targets);
  }
  return out;
}

// --- the shipped corpus --------------------------------------------------------

TEST(TokenShard, ShippedCorpusReads) {
  const auto train = read_token_shard(corpus_path("corpus_train.bin"), ByteTokenizer::kVocabSize);
  const auto validation = read_token_shard(corpus_path("corpus_val.bin"), ByteTokenizer::kVocabSize);
  // Counts as recorded in inputs/data/README.md; regenerate both together.
  EXPECT_EQ(train.size(), 1094086u);
  EXPECT_EQ(validation.size(), 57538u);
  EXPECT_TRUE(std::all_of(train.begin(), train.end(), [](std::uint16_t t) { return t < 256; }));
  EXPECT_TRUE(std::all_of(validation.begin(), validation.end(), [](std::uint16_t t) { return t < 256; }));
  const double fraction = static_cast<double>(validation.size()) / static_cast<double>(train.size() + validation.size());
  EXPECT_GT(fraction, 0.04);
  EXPECT_LT(fraction, 0.06);
  const std::string start = ByteTokenizer::decode(std::span(train).first(19));
  EXPECT_EQ(start, "PRIDE AND PREJUDICE");

  // The shipped files load as a dataset the trainer can sample from.
  TokenDataset data = TokenDataset::from_shards(corpus_path("corpus_train.bin"), corpus_path("corpus_val.bin"),
                                                ByteTokenizer::kVocabSize, 1);
  std::vector<int> inputs, targets;
  data.next_batch(8, 64, inputs, targets);
  EXPECT_EQ(inputs.size(), 8u * 64u);
  EXPECT_EQ(data.validation_batches(8, 64, 4).size(), 4u);
}

// The C++ writer produces exactly the bytes of the Python script that made
// the shipped files.
TEST(TokenShard, WriterMatchesCorpusScriptBytes) {
  const fs::path dir = geotrain::testing::scratch_dir("token-shard");
  for (const char* name : {"corpus_val.bin", "corpus_train.bin"}) {
    const std::string shipped = corpus_path(name);
    const auto tokens = read_token_shard(shipped, ByteTokenizer::kVocabSize);
    const std::string copy = (dir / name).string();
    write_token_shard(copy, tokens);
    EXPECT_TRUE(file_bytes(copy) == file_bytes(shipped)) << name;
  }
}

// --- the format -------------------------------------------------------------------

TEST(TokenShard, HeaderLayoutIsLlmC) {
  const fs::path dir = geotrain::testing::scratch_dir("token-shard");
  const std::string path = (dir / "layout.bin").string();
  const std::vector<std::uint16_t> tokens = {7, 0, 255, 256, 0xABCD, 65535};
  write_token_shard(path, tokens);
  const auto bytes = file_bytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 2u * tokens.size());
  // Magic 20240520 = 0x0134D888 at offset 0, little-endian.
  EXPECT_EQ(bytes[0], 0x88);
  EXPECT_EQ(bytes[1], 0xD8);
  EXPECT_EQ(bytes[2], 0x34);
  EXPECT_EQ(bytes[3], 0x01);
  EXPECT_EQ(int_at(bytes, 0), 20240520);
  EXPECT_EQ(int_at(bytes, 1), 1);
  EXPECT_EQ(int_at(bytes, 2), static_cast<std::int32_t>(tokens.size()));
  for (std::size_t i = 3; i < 256; ++i) EXPECT_EQ(int_at(bytes, i), 0) << "header[" << i << "]";
  // Tokens: uint16 little-endian from byte 1024.
  EXPECT_EQ(bytes[1024], 7);
  EXPECT_EQ(bytes[1025], 0);
  EXPECT_EQ(bytes[1024 + 2 * 3], 0x00);
  EXPECT_EQ(bytes[1024 + 2 * 3 + 1], 0x01);
  EXPECT_EQ(bytes[1024 + 2 * 4], 0xCD);
  EXPECT_EQ(bytes[1024 + 2 * 4 + 1], 0xAB);
  EXPECT_TRUE(bytes == shard_bytes(tokens));
}

TEST(TokenShard, WriteReadRoundTrip) {
  const fs::path dir = geotrain::testing::scratch_dir("token-shard");
  const std::string path = (dir / "round.bin").string();
  std::vector<std::uint16_t> tokens(5000);
  std::uint32_t x = 12345;
  for (auto& t : tokens) {
    x = x * 1664525u + 1013904223u;
    t = static_cast<std::uint16_t>(x >> 16);
  }
  tokens.back() = 65535;
  write_token_shard(path, tokens);
  EXPECT_EQ(read_token_shard(path, 65536), tokens);
  // A hand-made shard (e.g. from another tool) reads back too.
  write_bytes(path, shard_bytes({1, 2, 3}));
  EXPECT_EQ(read_token_shard(path, 4), (std::vector<std::uint16_t>{1, 2, 3}));
  EXPECT_THROW(write_token_shard(path, std::vector<std::uint16_t>{}), std::invalid_argument);
}

TEST(TokenShard, BadFilesNameFileAndProblem) {
  const fs::path dir = geotrain::testing::scratch_dir("token-shard");
  const std::vector<unsigned char> good = shard_bytes({1, 2, 3, 4, 5, 300, 6});

  auto with_int = [&](std::size_t index, std::int32_t value) {
    auto bytes = good;
    put_int(bytes, index, value);
    return bytes;
  };
  auto prefix = [&](std::size_t n) { return std::vector<unsigned char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)); };
  auto big_endian_magic = good;
  std::reverse(big_endian_magic.begin(), big_endian_magic.begin() + 4);
  auto trailing = good;
  trailing.push_back(0);
  trailing.push_back(0);

  struct Case {
    const char* name;
    std::vector<unsigned char> bytes;
    int vocab;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"empty", {}, 65536, "header: file is empty"},
      {"short-header", prefix(100), 65536, "header: file has 100 bytes, fewer than the 1024-byte header"},
      {"header-only-1023", prefix(1023), 65536, "fewer than the 1024-byte header"},
      {"bad-magic", with_int(0, 12345), 65536, "header[0] (magic): expected 20240520, got 12345"},
      {"text-file", std::vector<unsigned char>(2000, 'a'), 65536, "header[0] (magic): expected 20240520"},
      {"big-endian", big_endian_magic, 65536, "(the header is big-endian"},
      {"version-2", with_int(1, 2), 65536, "header[1] (version): expected 1, got 2 (version 2 stores uint32"},
      {"version-0", with_int(1, 0), 65536, "header[1] (version): expected 1, got 0"},
      {"zero-count", with_int(2, 0), 65536, "header[2] (token count): must be > 0, got 0"},
      {"negative-count", with_int(2, -5), 65536, "header[2] (token count): must be > 0, got -5"},
      {"truncated", prefix(good.size() - 3), 65536,
       "tokens: file has 1035 bytes, but the header's token count 7 needs 1024 + 2*7 = 1038 (truncated file)"},
      {"count-too-large", with_int(2, 100), 65536, "(truncated file)"},
      {"trailing", trailing, 65536, "(trailing bytes after the tokens"},
      {"token-too-large", good, 256, "tokens[5]: token id 300 >= vocab size 256"},
  };
  for (const Case& c : cases) {
    const std::string path = (dir / (std::string(c.name) + ".bin")).string();
    write_bytes(path, c.bytes);
    try {
      read_token_shard(path, c.vocab);
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const InputError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << c.name << ": " << message;
      EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": " << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << c.name << ": " << message;
    }
  }
  // The same shard is fine with a large enough vocabulary.
  const std::string path = (dir / "ok.bin").string();
  write_bytes(path, good);
  EXPECT_EQ(read_token_shard(path, 301).size(), 7u);

  const std::string missing = (dir / "missing.bin").string();
  try {
    read_token_shard(missing, 256);
    ADD_FAILURE() << "missing file accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(missing + ": file: cannot open", 0), 0u) << e.what();
  }
  EXPECT_THROW(read_token_shard(dir.string(), 256), InputError);
  EXPECT_THROW(TokenDataset::from_shards(missing, path, 256, 1), InputError);
}

// --- byte tokenizer ---------------------------------------------------------------

TEST(ByteTokenizer, EncodesEveryByteAndDecodesBack) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const auto tokens = ByteTokenizer::encode(all);
  ASSERT_EQ(tokens.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tokens[static_cast<std::size_t>(b)], b);
  EXPECT_EQ(ByteTokenizer::decode(tokens), all);

  const std::string text = "caf\xc3\xa9 \xe2\x80\x94 na\xc3\xafve\n";  // UTF-8 goes through byte by byte
  const auto utf8 = ByteTokenizer::encode(text);
  EXPECT_EQ(utf8.size(), text.size());
  EXPECT_EQ(utf8[3], 0xC3);
  EXPECT_EQ(ByteTokenizer::decode(utf8), text);
  const std::vector<int> ids(utf8.begin(), utf8.end());
  EXPECT_EQ(ByteTokenizer::decode(ids), text);
  EXPECT_TRUE(ByteTokenizer::encode("").empty());

  EXPECT_THROW(ByteTokenizer::decode(std::vector<int>{65, 256}), std::invalid_argument);
  EXPECT_THROW(ByteTokenizer::decode(std::vector<int>{-1}), std::invalid_argument);
  EXPECT_THROW(ByteTokenizer::decode(std::vector<std::uint16_t>{300}), std::invalid_argument);
}

// --- sampler ----------------------------------------------------------------------

TEST(TokenDataset, SameSeedSameBatchesOtherSeedOther) {
  const auto tokens = counting_tokens(10001);
  TokenDataset a(tokens, counting_tokens(1001), 42);
  TokenDataset b(tokens, counting_tokens(1001), 42);
  TokenDataset c(tokens, counting_tokens(1001), 43);
  const auto batches_a = take_batches(a, 30, 4, 8);
  EXPECT_EQ(batches_a, take_batches(b, 30, 4, 8));
  EXPECT_NE(batches_a, take_batches(c, 30, 4, 8));
  // Not simply file order.
  std::vector<int> inputs, targets;
  TokenDataset d(tokens, counting_tokens(1001), 42);
  d.next_batch(4, 8, inputs, targets);
  const auto starts = row_starts(inputs, 4, 8);
  EXPECT_FALSE(starts == (std::vector<int>{0, 8, 16, 24}));
}

TEST(TokenDataset, TargetsAreInputsShiftedByOne) {
  const int B = 5, T = 16;
  TokenDataset data(counting_tokens(4001), counting_tokens(2001), 7);
  std::vector<int> inputs, targets;
  for (int step = 0; step < 20; ++step) {
    data.next_batch(B, T, inputs, targets);
    ASSERT_EQ(inputs.size(), static_cast<std::size_t>(B * T));
    ASSERT_EQ(targets.size(), inputs.size());
    for (int b = 0; b < B; ++b) {
      const int start = inputs[static_cast<std::size_t>(b * T)];
      EXPECT_EQ(start % T, 0) << "windows start every T tokens";
      for (int t = 0; t < T; ++t) {
        const auto i = static_cast<std::size_t>(b * T + t);
        EXPECT_EQ(inputs[i], start + t);
        EXPECT_EQ(targets[i], inputs[i] + 1);
        if (t + 1 < T) {
          EXPECT_EQ(targets[i], inputs[i + 1]);
        }
      }
    }
  }
  // Same rule for validation batches.
  for (const TokenBatch& batch : data.validation_batches(B, T, 0)) {
    for (std::size_t i = 0; i < batch.inputs.size(); ++i) EXPECT_EQ(batch.targets[i], batch.inputs[i] + 1);
  }
}

TEST(TokenDataset, ReplicasReadDisjointSlicesOfTheGlobalBatch) {
  const int R = 4, B = 3, T = 8;
  const auto tokens = counting_tokens(8001);
  std::vector<TokenDataset> replicas;
  for (int r = 0; r < R; ++r) {
    replicas.emplace_back(tokens, counting_tokens(1001), 99);
    replicas.back().set_replica(r, R);
  }
  TokenDataset whole(tokens, counting_tokens(1001), 99);  // one replica reading the global batch
  std::vector<int> inputs, targets;
  for (int step = 0; step < 60; ++step) {  // 1000 windows / 12: crosses epochs
    std::vector<int> global;
    for (int r = 0; r < R; ++r) {
      replicas[static_cast<std::size_t>(r)].next_batch(B, T, inputs, targets);
      const auto starts = row_starts(inputs, B, T);
      global.insert(global.end(), starts.begin(), starts.end());
    }
    EXPECT_EQ(std::set<int>(global.begin(), global.end()).size(), global.size()) << "step " << step;
    whole.next_batch(R * B, T, inputs, targets);
    EXPECT_EQ(global, row_starts(inputs, R * B, T)) << "step " << step;
  }
  for (int r = 1; r < R; ++r) EXPECT_EQ(replicas[static_cast<std::size_t>(r)].state(), replicas[0].state());

  // Validation: replicas also split each batch without overlap.
  std::set<int> seen;
  std::size_t total = 0;
  for (int r = 0; r < R; ++r) {
    for (const TokenBatch& batch : replicas[static_cast<std::size_t>(r)].validation_batches(B, T, 0)) {
      for (int s : row_starts(batch.inputs, B, T)) seen.insert(s);
      total += static_cast<std::size_t>(B);
    }
  }
  EXPECT_EQ(seen.size(), total);
  EXPECT_THROW(replicas[0].set_replica(4, 4), std::invalid_argument);
  EXPECT_THROW(replicas[0].set_replica(0, 0), std::invalid_argument);
}

TEST(TokenDataset, EachEpochVisitsEveryWindowOnceAndReshuffles) {
  const int B = 4, T = 10;
  // 40 windows; 10 batches an epoch.
  TokenDataset data(counting_tokens(401), counting_tokens(101), 5);
  ASSERT_EQ(TokenDataset::window_count(401, T), 40u);
  std::vector<int> inputs, targets;
  std::vector<std::vector<int>> epochs(3);
  for (int step = 0; step < 30; ++step) {
    data.next_batch(B, T, inputs, targets);
    EXPECT_EQ(data.state().epoch, step / 10);
    const auto starts = row_starts(inputs, B, T);
    auto& epoch = epochs[static_cast<std::size_t>(step / 10)];
    epoch.insert(epoch.end(), starts.begin(), starts.end());
  }
  for (const auto& epoch : epochs) {
    std::vector<int> sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> all;
    for (int w = 0; w < 40; ++w) all.push_back(w * T);
    EXPECT_EQ(sorted, all);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);

  // Windows left over at the end of an epoch (43 windows, 10 a batch: 3) are
  // skipped; the next epoch starts fresh.
  TokenDataset odd(counting_tokens(431), counting_tokens(101), 5);
  for (int step = 0; step < 4; ++step) odd.next_batch(10, T, inputs, targets);
  EXPECT_EQ(odd.state(), (SamplerState{5, 0, 40}));
  odd.next_batch(10, T, inputs, targets);
  EXPECT_EQ(odd.state(), (SamplerState{5, 1, 10}));
}

TEST(TokenDataset, RestoredStateContinuesIdentically) {
  const int B = 3, T = 12;
  const auto tokens = counting_tokens(3001);  // 250 windows; global batch 2*3: 41 batches an epoch
  TokenDataset first(tokens, counting_tokens(501), 2024);
  first.set_replica(1, 2);
  take_batches(first, 30, B, T);
  const SamplerState saved = first.state();
  EXPECT_EQ(saved.seed, 2024u);
  const auto continuation = take_batches(first, 40, B, T);  // crosses into epoch 1
  EXPECT_EQ(first.state().epoch, 1);

  // A new process: same data, other seed at construction, state restored.
  TokenDataset resumed(tokens, counting_tokens(501), 1);
  resumed.set_replica(1, 2);
  resumed.restore(saved);
  EXPECT_EQ(resumed.state(), saved);
  EXPECT_EQ(take_batches(resumed, 40, B, T), continuation);

  // Restoring the same object rewinds it, mid-epoch permutation included.
  first.restore(saved);
  EXPECT_EQ(take_batches(first, 40, B, T), continuation);
  // And a state taken in a later epoch.
  const SamplerState later = first.state();
  const auto after = take_batches(first, 5, B, T);
  resumed.restore(later);
  EXPECT_EQ(take_batches(resumed, 5, B, T), after);

  EXPECT_THROW(resumed.restore(SamplerState{1, -1, 0}), std::invalid_argument);
}

TEST(TokenDataset, ValidationBatchesAreFixed) {
  const int B = 4, T = 8;
  TokenDataset data(counting_tokens(2001), counting_tokens(1001), 3);  // 125 validation windows
  const auto first = data.validation_batches(B, T, 5);
  ASSERT_EQ(first.size(), 5u);
  std::vector<int> inputs, targets;
  data.next_batch(B, T, inputs, targets);  // training does not move validation
  const auto second = data.validation_batches(B, T, 5);
  ASSERT_EQ(second.size(), first.size());
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].inputs, second[i].inputs);
    EXPECT_EQ(first[i].targets, second[i].targets);
  }
  // File order, whole windows: batch i row b starts at (i*B + b)*T.
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(row_starts(first[i].inputs, B, T),
              (std::vector<int>{static_cast<int>(i * B) * T, static_cast<int>(i * B + 1) * T,
                                static_cast<int>(i * B + 2) * T, static_cast<int>(i * B + 3) * T}));
  }
  EXPECT_EQ(data.validation_batches(B, T, 0).size(), 125u / 4u);  // all that fit
  EXPECT_EQ(data.validation_batches(B, T, 1000).size(), 125u / 4u);
}

TEST(TokenDataset, SplitTakesValidationFromTheTail) {
  const fs::path dir = geotrain::testing::scratch_dir("token-shard");
  const std::string path = (dir / "one.bin").string();
  write_token_shard(path, counting_tokens(1000));
  const TokenDataset data = TokenDataset::from_split(path, 1000, 0.1, 1);
  ASSERT_EQ(data.train_tokens().size(), 900u);
  ASSERT_EQ(data.validation_tokens().size(), 100u);
  EXPECT_EQ(data.train_tokens().front(), 0);
  EXPECT_EQ(data.train_tokens().back(), 899);
  EXPECT_EQ(data.validation_tokens().front(), 900);
  EXPECT_EQ(data.validation_tokens().back(), 999);
  EXPECT_NE(data.validation_name().find(path), std::string::npos);
  EXPECT_THROW(TokenDataset::from_split(path, 1000, 0.0, 1), std::invalid_argument);
  EXPECT_THROW(TokenDataset::from_split(path, 1000, 1.0, 1), std::invalid_argument);
  EXPECT_THROW(TokenDataset::from_split(path, 1000, 0.0001, 1), InputError);  // 0 validation tokens
}

TEST(TokenDataset, TooLittleDataForABatchNamesTheFile) {
  const fs::path dir = geotrain::testing::scratch_dir("token-shard");
  const std::string train = (dir / "train.bin").string();
  const std::string validation = (dir / "val.bin").string();
  write_token_shard(train, counting_tokens(65));     // 8 windows of 8+1
  write_token_shard(validation, counting_tokens(9));  // 1 window
  TokenDataset data = TokenDataset::from_shards(train, validation, 65536, 1);
  std::vector<int> inputs, targets;
  data.next_batch(8, 8, inputs, targets);  // exactly one global batch
  try {
    data.next_batch(9, 8, inputs, targets);
    ADD_FAILURE() << "accepted a batch larger than the data";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(train + ": tokens: 65 tokens hold 8 sequences of 8+1 tokens", 0), 0u) << message;
  }
  try {
    data.validation_batches(2, 8, 1);
    ADD_FAILURE() << "accepted a validation batch larger than the data";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(validation + ": tokens:", 0), 0u) << e.what();
  }
  EXPECT_THROW(data.next_batch(0, 8, inputs, targets), std::invalid_argument);
  EXPECT_THROW(data.next_batch(1, 0, inputs, targets), std::invalid_argument);
}

}  // namespace
}  // namespace geotrain::io
