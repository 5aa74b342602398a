// Tokenizer files (io/bpe_tokenizer.hpp): tokenizer_from_text on the input.
// Invariants:
//  - an accepted file has a vocabulary of at least the 256 bytes;
//  - with it, any bytes round-trip: decode(encode(s)) == s for sample texts
//    and for the input itself, every id below the vocabulary;
//  - with a fixed small tokenizer (merges inside and across words, an added
//    token), the input as text round-trips, and GPT-2's pre-tokenization
//    cuts it into non-empty pieces that are the input, in order.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_support.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/io/bpe_tokenizer.hpp"

namespace {

using geotrain::io::Tokenizer;

// A token as the file spells it: GPT-2's printable character for each byte,
// every character as a \u escape (all of them are below U+0144).
std::string json_token(const std::string& bytes) {
  std::string out = "\"";
  for (const char c : bytes) {
    const int b = static_cast<unsigned char>(c);
    int next = 0x100, code = b;
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (!printable) {
      for (int k = 0; k < b; ++k) {
        next += !((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF));
      }
      code = next;
    }
    char escaped[16];
    std::snprintf(escaped, sizeof escaped, "\\u%04X", static_cast<unsigned>(code));
    out += escaped;
  }
  return out + "\"";
}

std::string small_tokenizer_file() {
  const std::pair<std::string, std::string> merges[] = {
      {"t", "h"}, {"h", "e"}, {"th", "e"}, {" ", "t"}, {" ", "the"}, {"e", "r"}, {" ", "a"}, {"\xc3", "\xa9"},
      {" ", " "}, {"  ", " "}, {"\n", "\n"}, {"'", "s"}, {"=", "="}, {"==", "=="}};
  std::string vocab, merge_list;
  int id = 0;
  const auto add_token = [&](const std::string& bytes) {
    vocab.append(vocab.empty() ? "" : ",").append(json_token(bytes)).append(":").append(std::to_string(id++));
  };
  for (int b = 0; b < 256; ++b) add_token(std::string(1, static_cast<char>(b)));
  for (const auto& [left, right] : merges) {
    add_token(left + right);
    merge_list.append(merge_list.empty() ? "[[" : ",[").append(json_token(left)).append(",").append(json_token(right));
    merge_list.append("]");
  }
  return R"({"added_tokens":[{"id":)" + std::to_string(id) +
         R"(,"content":"<|endoftext|>","special":true}],"normalizer":null,)"
         R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},)"
         R"("decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{)" +
         vocab + "},\"merges\":" + merge_list + "]}}";
}

std::string without_spaces(std::string text) {
  std::erase(text, ' ');
  return text;
}

// A file with add_prefix_space puts a space before each stretch of text
// that lacks one, so it round-trips only up to spaces.
void check_round_trip(const Tokenizer& tok, const std::string& text, const char* what) {
  const std::vector<int> probe = tok.encode("x");
  const bool adds_spaces = tok.decode(probe) != "x";
  const std::vector<int> ids = tok.encode(text);
  for (const int id : ids) FUZZ_CHECK(id >= 0 && id < tok.vocabulary(), std::string(what) + ": id " + std::to_string(id));
  const std::string back = tok.decode(ids);
  FUZZ_CHECK(adds_spaces ? without_spaces(back) == without_spaces(text) : back == text,
             std::string(what) + ": decode(encode(text)) != text");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  static const std::unique_ptr<Tokenizer> small = geotrain::io::bpe_tokenizer_from_json(small_tokenizer_file(), "small");
  FUZZ_CHECK(small->encode(" the").size() == 1, "the small tokenizer's merges do not apply");
  check_round_trip(*small, input, "small tokenizer, input as text");
  std::string joined;
  for (const std::string_view piece : geotrain::io::gpt2_pre_tokenize(input)) {
    FUZZ_CHECK(!piece.empty(), "empty piece");
    FUZZ_CHECK(piece.data() == input.data() + joined.size(), "pieces out of order");
    joined += piece;
  }
  FUZZ_CHECK(joined == input, "pieces do not cover the input");

  std::unique_ptr<Tokenizer> tok;
  try {
    tok = geotrain::io::bpe_tokenizer_from_json(input, "fuzz.json");
  } catch (const geotrain::InputError&) {
    return 0;
  }
  FUZZ_CHECK(tok->vocabulary() >= 256, "vocabulary " + std::to_string(tok->vocabulary()));
  for (const char* sample : {"Hello world, it's 3.14!\n\n  x", "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac <|endoftext|>",
                             "\xff\xfe\x80 \xc3"}) {
    check_round_trip(*tok, sample, "accepted file, sample text");
  }
  check_round_trip(*tok, input, "accepted file, input as text");
  return 0;
}
