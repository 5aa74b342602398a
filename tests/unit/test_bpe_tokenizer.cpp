// Byte-level BPE tokenizer files: encodings against the Hugging Face
// tokenizers library (golden file from tests/golden/make_tokenizer_golden.py),
// malformed files, and the tokenizer that travels with a shard.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/bpe_tokenizer.hpp"
#include "geotrain/io/config.hpp"
#include "geotrain/io/token_shard.hpp"
#include "geotrain/io/tokenizer.hpp"
#include "support/scratch_dir.hpp"

namespace geotrain::io {
namespace {

using nlohmann::json;

std::string golden_path(const std::string& name) {
  return std::string(GEOTRAIN_SOURCE_DIR) + "/tests/golden/data/" + name;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

const std::string& golden_tokenizer() {
  static const std::string text = read_text(golden_path("tokenizer_bpe.json"));
  return text;
}

const json& golden_cases() {
  static const json cases = json::parse(read_text(golden_path("tokenizer_cases.json")))["cases"];
  return cases;
}

// The same edits the golden script makes for its variants.
std::string variant(const std::string& name) {
  json file = json::parse(golden_tokenizer());
  if (name == "add_prefix_space") {
    file["pre_tokenizer"]["add_prefix_space"] = true;
  } else if (name == "ignore_merges") {
    file["model"]["ignore_merges"] = true;
    file["model"]["vocab"]["\u0120world"] = file["model"]["vocab"].size();
  }
  return file.dump();
}

std::string show(const std::string& text) { return json(text).dump(); }

TEST(BpeTokenizer, GoldenFileLoads) {
  ASSERT_FALSE(golden_tokenizer().empty()) << golden_path("tokenizer_bpe.json");
  ASSERT_GT(golden_cases().size(), 300u);
  const auto tok = tokenizer_from_text(golden_tokenizer(), "tokenizer_bpe.json");
  EXPECT_EQ(tok->vocabulary(), 1024);
  EXPECT_NE(tok->description().find("byte-level BPE"), std::string::npos);
}

TEST(BpeTokenizer, PreTokenizationMatchesTheLibrary) {
  for (const json& c : golden_cases()) {
    const std::string text = c["text"];
    std::vector<std::string> pieces;
    for (const std::string_view p : gpt2_pre_tokenize(text)) pieces.emplace_back(p);
    EXPECT_EQ(pieces, c["pieces"].get<std::vector<std::string>>()) << show(text);
  }
}

TEST(BpeTokenizer, EncodeAndDecodeMatchTheLibrary) {
  for (const char* name : {"base", "add_prefix_space", "ignore_merges"}) {
    const auto tok = tokenizer_from_text(variant(name), name);
    int differing_from_base = 0;
    for (const json& c : golden_cases()) {
      const std::string text = c["text"];
      const std::vector<int> expected = c[name];
      EXPECT_EQ(tok->encode(text), expected) << name << ": " << show(text);
      differing_from_base += expected != c["base"].get<std::vector<int>>();
      if (std::string(name) != "add_prefix_space") {
        EXPECT_EQ(tok->decode(expected), text) << name << ": " << show(text);
      }
    }
    // Each variant must change some encodings, or it would test nothing.
    if (std::string(name) != "base") {
      EXPECT_GT(differing_from_base, 0) << name;
    }
  }
}

TEST(BpeTokenizer, MergesWrittenAsStringsReadTheSame) {
  json file = json::parse(golden_tokenizer());
  for (json& merge : file["model"]["merges"]) merge = merge[0].get<std::string>() + " " + merge[1].get<std::string>();
  const auto tok = tokenizer_from_text(file.dump(), "string-merges.json");
  for (const json& c : golden_cases()) {
    EXPECT_EQ(tok->encode(c["text"].get<std::string>()), c["base"].get<std::vector<int>>()) << show(c["text"]);
  }
}

TEST(BpeTokenizer, AnyBytesRoundTrip) {
  const auto tok = tokenizer_from_text(golden_tokenizer(), "tokenizer_bpe.json");
  const std::string bytes[] = {std::string("\xff\xfe abc \xc3", 8), std::string("\x00\x01\x80 \xed\xa0\x80", 7),
                               std::string("caf\xc3\xa9\xe2\x82", 7)};
  for (const std::string& text : bytes) EXPECT_EQ(tok->decode(tok->encode(text)), text) << show(text);
}

TEST(BpeTokenizer, LongPieceStaysFast) {
  const auto tok = tokenizer_from_text(golden_tokenizer(), "tokenizer_bpe.json");
  std::string line;  // one piece of letters that merges shorten
  for (int i = 0; i < 70000; ++i) line += "the";
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> ids = tok->encode(line);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(tok->decode(ids), line);
  EXPECT_LT(ids.size(), line.size());
  EXPECT_LT(seconds, 5.0) << "quadratic merging?";
}

TEST(BpeTokenizer, DecodeNamesTheBadPosition) {
  const auto tok = tokenizer_from_text(golden_tokenizer(), "tok.json");
  const std::vector<int> ids = {40, 1024};
  try {
    tok->decode(ids);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tok.json: token 1 is id 1024"), std::string::npos) << e.what();
  }
}

// Edits one field of the golden file; the error must name the file and the field.
struct BadCase {
  const char* name;
  std::function<void(json&)> damage;
  const char* expected;  // a substring of the message after "bad.json: "
};

TEST(BpeTokenizer, MalformedFilesNameTheField) {
  const BadCase cases[] = {
      {"model type", [](json& f) { f["model"]["type"] = "WordPiece"; }, "model.type: is \"WordPiece\""},
      {"no model", [](json& f) { f.erase("model"); }, "model: missing"},
      {"normalizer", [](json& f) { f["normalizer"] = {{"type", "NFC"}}; }, "normalizer: is NFC"},
      {"pre-tokenizer", [](json& f) { f["pre_tokenizer"] = {{"type", "Metaspace"}}; }, "pre_tokenizer.type: is Metaspace"},
      {"decoder", [](json& f) { f["decoder"] = {{"type", "WordPiece"}}; }, "decoder.type: is WordPiece"},
      {"dropout", [](json& f) { f["model"]["dropout"] = 0.1; }, "model.dropout: is 0.1: not supported"},
      {"prefix", [](json& f) { f["model"]["continuing_subword_prefix"] = "##"; }, "model.continuing_subword_prefix"},
      {"merge text", [](json& f) { f["model"]["merges"][3] = "a b c"; }, "model.merges[3]: \"a b c\" is not two tokens"},
      {"merge kind", [](json& f) { f["model"]["merges"][4] = 7; }, "model.merges[4]: must be"},
      {"merge token", [](json& f) { f["model"]["merges"][5] = {"zzz", "q"}; }, "model.merges[5]: 'zzz' is not in model.vocab"},
      {"vocab id", [](json& f) { f["model"]["vocab"]["e"] = -3; }, "model.vocab[\"e\"]: must be a token id"},
      {"vocab id kind", [](json& f) { f["model"]["vocab"]["e"] = "x"; }, "model.vocab[\"e\"]: must be a token id"},
      {"duplicate id", [](json& f) { f["model"]["vocab"]["e"] = f["model"]["vocab"]["f"]; }, "is also the id of"},
      {"missing byte", [](json& f) { f["model"]["vocab"].erase("\u010a"); }, "model.vocab: has no token for byte 0x0A"},
      {"added lstrip", [](json& f) { f["added_tokens"][0]["lstrip"] = true; }, "added_tokens[0].lstrip: is true"},
      {"added content", [](json& f) { f["added_tokens"][0]["content"] = ""; }, "added_tokens[0].content: must not be empty"},
      {"added id", [](json& f) { f["added_tokens"][0].erase("id"); }, "added_tokens[0].id: missing"},
      {"added id taken", [](json& f) { f["added_tokens"][0]["id"] = f["model"]["vocab"]["e"]; },
       "added_tokens[0].id: 69 is already the id of 'e', not of '<|endoftext|>'"},
  };
  for (const BadCase& c : cases) {
    json file = json::parse(golden_tokenizer());
    c.damage(file);
    try {
      tokenizer_from_text(file.dump(), "bad.json");
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const InputError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("bad.json: ", 0), 0u) << c.name << ": " << message;
      EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": " << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << c.name << ": " << message;
    }
  }
  for (const std::string text : {"{", "[1, 2]", "not json"}) {
    EXPECT_THROW(tokenizer_from_text(text, "bad.json"), InputError) << text;
  }
}

// A folder with a shard and, optionally, a tokenizer file beside it.
std::string shard_in(const std::filesystem::path& dir, const std::string& name, const std::string* tokenizer) {
  std::filesystem::create_directories(dir);
  const std::vector<std::uint16_t> tokens = {1, 2, 3, 4};
  write_token_shard((dir / name).string(), tokens);
  if (tokenizer != nullptr) write_text((dir / "tokenizer.json").string(), *tokenizer);
  return (dir / name).string();
}

TEST(TokenizerForShard, TheFileBesideTheShard) {
  const auto dir = geotrain::testing::scratch_dir("tokenizer");
  const std::string shard = shard_in(dir / "bpe", "train.bin", &golden_tokenizer());
  EXPECT_EQ(tokenizer_text_for_shard(shard), golden_tokenizer());
  EXPECT_EQ(tokenizer_for_shard(shard)->vocabulary(), 1024);
  EXPECT_EQ(tokenizer_for_shard(shard_in(dir / "byte", "train.bin", nullptr))->description(), "byte");
  const std::string empty;
  try {
    tokenizer_text_for_shard(shard_in(dir / "empty", "train.bin", &empty));
    FAIL() << "an empty tokenizer.json was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json: empty tokenizer file"), std::string::npos) << e.what();
  }
}

TEST(TokenizerForTraining, ModelVocabularyAndValidationTokenizer) {
  const auto dir = geotrain::testing::scratch_dir("tokenizer");
  Config c;
  c.source = "run.toml";
  c.model.file = "tiny.toml";
  c.data.train = shard_in(dir / "bpe", "train.bin", &golden_tokenizer());
  c.data.validation = shard_in(dir / "bpe", "val.bin", &golden_tokenizer());
  EXPECT_EQ(tokenizer_text_for_training(c, 1024), golden_tokenizer());
  try {
    tokenizer_text_for_training(c, 256);
    FAIL() << "vocabulary 256 accepted for a 1024-id tokenizer";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("tiny.toml: model.vocabulary: is 256", 0), 0u) << message;
    EXPECT_NE(message.find((dir / "bpe" / "tokenizer.json").string() + " has 1024 ids"), std::string::npos) << message;
  }
  c.data.validation = shard_in(dir / "byte", "val.bin", nullptr);
  try {
    tokenizer_text_for_training(c, 1024);
    FAIL() << "validation shard with another tokenizer accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("run.toml: data.validation: ", 0), 0u) << e.what();
  }
  c.data.train = shard_in(dir / "byte", "train.bin", nullptr);
  EXPECT_EQ(tokenizer_text_for_training(c, 64), "");  // byte shards: the shard reader checks ids
}

}  // namespace
}  // namespace geotrain::io
