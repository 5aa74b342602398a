// Byte-level BPE from a Hugging Face tokenizers file (see
// include/geotrain/io/bpe_tokenizer.hpp for what matches the library and what
// does not).
#include "geotrain/io/bpe_tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "geotrain/common/errors.hpp"

namespace geotrain::io {
namespace {

using nlohmann::json;

// Largest token id accepted: above any real vocabulary (GPT-2 50257, the
// largest in use about 256k), small enough that a file naming one id bounds
// the per-id tables (32 MiB) instead of allocating what it claims.
constexpr int kMaxId = (1 << 20) - 1;

struct CodePointRange {
  char32_t first, last;
};
#include "gpt2_unicode_classes.inc"

enum class CharClass : std::uint8_t { letter, number, space, other };

template <std::size_t N>
bool in_ranges(const CodePointRange (&ranges)[N], char32_t c) {
  const auto* after = std::upper_bound(std::begin(ranges), std::end(ranges), c,
                                       [](char32_t value, const CodePointRange& r) { return value < r.first; });
  return after != std::begin(ranges) && c <= std::prev(after)->last;
}

CharClass classify(char32_t c) {
  if (in_ranges(kLetterRanges, c)) return CharClass::letter;
  if (in_ranges(kNumberRanges, c)) return CharClass::number;
  if (in_ranges(kSpaceRanges, c)) return CharClass::space;
  return CharClass::other;
}

// Length of the valid UTF-8 sequence at s[i] and its code point in `cp`; 0
// where none starts there (stray continuation byte, overlong form, surrogate,
// beyond U+10FFFF, cut short).
std::size_t utf8_sequence(std::string_view s, std::size_t i, char32_t& cp) {
  const auto lead = static_cast<unsigned char>(s[i]);
  std::size_t length = 1;
  char32_t smallest = 0;
  if (lead < 0x80) {
    cp = lead;
    return 1;
  } else if ((lead & 0xE0) == 0xC0) {
    length = 2, cp = lead & 0x1F, smallest = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, cp = lead & 0x0F, smallest = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, cp = lead & 0x07, smallest = 0x10000;
  } else {
    return 0;
  }
  if (i + length > s.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    const auto next = static_cast<unsigned char>(s[i + k]);
    if ((next & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (next & 0x3F);
  }
  const bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
  return cp < smallest || cp > 0x10FFFF || surrogate ? 0 : length;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

struct Char {
  std::size_t offset;  // in bytes
  char32_t cp;
  CharClass cls;
};

// The text as characters. A byte that starts no valid sequence is one
// character of class `other` (with a code point no real character has), so
// any bytes split and encode, and decode back unchanged.
std::vector<Char> characters(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const std::size_t length = utf8_sequence(text, i, cp);
    if (length == 0) {
      chars.push_back({i, static_cast<char32_t>(0x110000 + static_cast<unsigned char>(text[i])), CharClass::other});
      ++i;
    } else {
      chars.push_back({i, cp, classify(cp)});
      i += length;
    }
  }
  return chars;
}

// End of 's|'t|'re|'ve|'m|'ll|'d at chars[i], or i where none matches.
std::size_t contraction_end(const std::vector<Char>& c, std::size_t i) {
  if (c[i].cp != U'\'') return i;
  static constexpr std::u32string_view kSuffixes[] = {U"s", U"t", U"re", U"ve", U"m", U"ll", U"d"};
  for (const std::u32string_view suffix : kSuffixes) {
    if (i + suffix.size() >= c.size()) continue;
    bool match = true;
    for (std::size_t k = 0; k < suffix.size() && match; ++k) match = c[i + 1 + k].cp == suffix[k];
    if (match) return i + 1 + suffix.size();
  }
  return i;
}

// End of the regex's match at chars[i], trying its alternatives in order as
// the regex engine does.
std::size_t match_end(const std::vector<Char>& c, std::size_t i) {
  const std::size_t n = c.size();
  if (const std::size_t end = contraction_end(c, i); end > i) return end;
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then a run of one class.
  const std::size_t first = c[i].cp == U' ' && i + 1 < n ? i + 1 : i;
  if (c[first].cls != CharClass::space) {
    std::size_t end = first;
    while (end < n && c[end].cls == c[first].cls) ++end;
    return end;
  }
  // White space: '\s+(?!\S)' keeps the last character of a run that a
  // non-space follows for that word (where the run is longer than one), '\s+' takes the rest.
  std::size_t end = i;
  while (end < n && c[end].cls == CharClass::space) ++end;
  if (end == n) return n;
  return end - i >= 2 ? end - 1 : end;
}

// GPT-2's byte -> character table: printable Latin-1 bytes stand for
// themselves, the other 68 bytes for U+0100.. in byte order, so that every
// token of the vocabulary file is printable text.
std::array<char32_t, 256> byte_characters() {
  std::array<char32_t, 256> table{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

std::string in_quotes(const std::string& token) { return "'" + token + "'"; }

// What a pipeline step is, for messages: its "type", else the JSON itself.
std::string kind_of(const json& step) {
  if (step.is_object() && step.contains("type") && step["type"].is_string()) return step["type"].get<std::string>();
  return step.is_object() ? "an object without a \"type\"" : step.dump();
}

}  // namespace

std::vector<std::string_view> gpt2_pre_tokenize(std::string_view text) {
  const std::vector<Char> chars = characters(text);
  std::vector<std::string_view> pieces;
  for (std::size_t i = 0; i < chars.size();) {
    const std::size_t end = match_end(chars, i);
    const std::size_t to = end < chars.size() ? chars[end].offset : text.size();
    pieces.push_back(text.substr(chars[i].offset, to - chars[i].offset));
    i = end;
  }
  return pieces;
}

namespace {

class ByteLevelBpe : public Tokenizer {
 public:
  ByteLevelBpe(const std::string& file_text, const std::string& origin);

  std::vector<int> encode(std::string_view text) const override;
  std::string decode(std::span<const int> tokens) const override;
  int vocabulary() const override { return static_cast<int>(id_bytes_.size()); }
  std::string description() const override {
    return "byte-level BPE (vocabulary " + std::to_string(vocabulary()) + ", " + origin_ + ")";
  }

 private:
  struct Merge {
    int rank;
    int merged;
  };
  struct Added {
    std::string content;
    int id;
  };

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw InputError(origin_ + ": " + field + ": " + what);
  }
  const json& member(const json& object, const std::string& key, const std::string& field, json::value_t type) const;
  void check_off(const json& object, const std::string& key, const std::string& field) const;
  void read_pipeline(const json& file);
  void read_vocab(const json& model);
  void read_merges(const json& merges);
  void read_added_tokens(const json& file);
  void set_id_text(int id, const std::string& text, bool byte_level);
  const Added* added_at(std::string_view text, std::size_t i) const;
  void encode_segment(std::string_view segment, std::vector<int>& out) const;
  void encode_piece(std::string_view piece, std::vector<int>& out) const;

  std::string origin_;
  std::array<char32_t, 256> byte_chars_ = byte_characters();
  std::array<int, 0x144> char_bytes_;  // the inverse: byte of each byte character, else -1
  std::unordered_map<std::string, int> vocab_;  // byte-level token text -> id
  std::array<int, 256> byte_ids_{};             // id of each single byte
  std::unordered_map<std::uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  std::vector<Added> added_;                    // longest first
  std::vector<std::string> id_bytes_;           // what each id decodes to
  std::vector<bool> id_known_;
  bool add_prefix_space_ = false;
  bool use_regex_ = true;
  bool ignore_merges_ = false;
};

const json& ByteLevelBpe::member(const json& object, const std::string& key, const std::string& field,
                                 json::value_t type) const {
  const auto it = object.find(key);
  if (it == object.end()) fail(field, "missing");
  if (it->type() != type && !(type == json::value_t::number_integer && it->is_number_unsigned())) {
    fail(field, std::string("must be ") + json(type).type_name() + ", got " + it->type_name());
  }
  return *it;
}

// Options this reader does not implement: absent, null, false, 0 or "" only.
void ByteLevelBpe::check_off(const json& object, const std::string& key, const std::string& field) const {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return;
  const bool off = (it->is_boolean() && !it->get<bool>()) || (it->is_number() && it->get<double>() == 0) ||
                   (it->is_string() && it->get<std::string>().empty());
  if (!off) fail(field, "is " + it->dump() + ": not supported (geotrain reads GPT-2-style byte-level BPE)");
}

ByteLevelBpe::ByteLevelBpe(const std::string& file_text, const std::string& origin) : origin_(origin) {
  char_bytes_.fill(-1);
  for (int b = 0; b < 256; ++b) char_bytes_[byte_chars_[b]] = b;
  json file;
  try {
    file = json::parse(file_text);
  } catch (const json::parse_error& e) {
    throw InputError(origin_ + ": not a tokenizer JSON file: " + e.what());
  }
  if (!file.is_object()) fail("(top level)", "must be a JSON object (a tokenizers file)");
  read_pipeline(file);
  const json& model = member(file, "model", "model", json::value_t::object);
  if (model.contains("type") && model["type"] != "BPE") {
    fail("model.type", "is " + model["type"].dump() + "; only BPE models are supported");
  }
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"}) {
    check_off(model, key, std::string("model.") + key);
  }
  if (const auto it = model.find("ignore_merges"); it != model.end() && !it->is_null()) {
    if (!it->is_boolean()) fail("model.ignore_merges", "must be true or false");
    ignore_merges_ = it->get<bool>();
  }
  read_vocab(model);
  read_merges(member(model, "merges", "model.merges", json::value_t::array));
  read_added_tokens(file);
}

void ByteLevelBpe::read_pipeline(const json& file) {
  if (const auto it = file.find("normalizer"); it != file.end() && !it->is_null()) {
    fail("normalizer", "is " + kind_of(*it) + "; only files without a normalizer are supported");
  }
  const json& pre = member(file, "pre_tokenizer", "pre_tokenizer", json::value_t::object);
  if (kind_of(pre) != "ByteLevel") {
    fail("pre_tokenizer.type", "is " + kind_of(pre) + "; only ByteLevel (GPT-2's pre-tokenization) is supported");
  }
  for (auto [key, target] : {std::pair{"add_prefix_space", &add_prefix_space_}, std::pair{"use_regex", &use_regex_}}) {
    if (const auto it = pre.find(key); it != pre.end()) {
      if (!it->is_boolean()) fail(std::string("pre_tokenizer.") + key, "must be true or false");
      *target = it->get<bool>();
    }
  }
  const json& decoder = member(file, "decoder", "decoder", json::value_t::object);
  if (kind_of(decoder) != "ByteLevel") {
    fail("decoder.type", "is " + kind_of(decoder) + "; only ByteLevel is supported");
  }
}

void ByteLevelBpe::set_id_text(int id, const std::string& text, bool byte_level) {
  if (static_cast<std::size_t>(id) >= id_bytes_.size()) {
    id_bytes_.resize(id + 1);
    id_known_.resize(id + 1, false);
  }
  id_known_[id] = true;
  if (!byte_level) {
    id_bytes_[id] = text;
    return;
  }
  // Byte characters back to bytes; anything else (not a byte-level token)
  // passes through as it is, as the library's ByteLevel decoder does.
  std::string bytes;
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const std::size_t length = utf8_sequence(text, i, cp);
    if (length > 0 && cp < char_bytes_.size() && char_bytes_[cp] >= 0) {
      bytes += static_cast<char>(char_bytes_[cp]);
    } else {
      bytes.append(text, i, std::max<std::size_t>(length, 1));
    }
    i += std::max<std::size_t>(length, 1);
  }
  id_bytes_[id] = std::move(bytes);
}

void ByteLevelBpe::read_vocab(const json& model) {
  const json& vocab = member(model, "vocab", "model.vocab", json::value_t::object);
  std::unordered_map<int, std::string> owner;
  for (const auto& [token, value] : vocab.items()) {
    const std::string field = "model.vocab[" + json(token).dump() + "]";
    if (!value.is_number_integer() || value.get<std::int64_t>() < 0 || value.get<std::int64_t>() > kMaxId) {
      fail(field, "must be a token id 0.." + std::to_string(kMaxId) + ", got " + value.dump());
    }
    const int id = value.get<int>();
    if (const auto [it, fresh] = owner.emplace(id, token); !fresh) {
      fail(field, "id " + std::to_string(id) + " is also the id of " + in_quotes(it->second));
    }
    vocab_.emplace(token, id);
    set_id_text(id, token, true);
  }
  for (int b = 0; b < 256; ++b) {
    std::string character;
    append_utf8(character, byte_chars_[b]);
    const auto it = vocab_.find(character);
    if (it == vocab_.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      fail("model.vocab", std::string("has no token for byte ") + hex + " (" + in_quotes(character) +
                              "): not a byte-level vocabulary (every byte needs a token)");
    }
    byte_ids_[b] = it->second;
  }
}

void ByteLevelBpe::read_merges(const json& merges) {
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const json& entry = merges[rank];
    const std::string field = "model.merges[" + std::to_string(rank) + "]";
    std::string left, right;
    if (entry.is_string()) {
      const std::string text = entry.get<std::string>();
      const std::size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        fail(field, json(text).dump() + " is not two tokens separated by one space");
      }
      left = text.substr(0, space), right = text.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
      left = entry[0].get<std::string>(), right = entry[1].get<std::string>();
    } else {
      fail(field, "must be \"left right\" or [\"left\", \"right\"], got " + entry.dump());
    }
    int ids[3] = {0, 0, 0};
    const std::string parts[3] = {left, right, left + right};
    for (int k = 0; k < 3; ++k) {
      const auto it = vocab_.find(parts[k]);
      if (it == vocab_.end()) fail(field, in_quotes(parts[k]) + " is not in model.vocab");
      ids[k] = it->second;
    }
    // A pair listed twice keeps its later rank, as the library's map does.
    merges_[static_cast<std::uint64_t>(ids[0]) << 32 | static_cast<std::uint32_t>(ids[1])] = {
        static_cast<int>(rank), ids[2]};
  }
}

void ByteLevelBpe::read_added_tokens(const json& file) {
  const auto it = file.find("added_tokens");
  if (it == file.end() || it->is_null()) return;
  if (!it->is_array()) fail("added_tokens", "must be an array");
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& token = (*it)[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    if (!token.is_object()) fail(field, "must be an object");
    const json& id = member(token, "id", field + ".id", json::value_t::number_integer);
    const std::string content = member(token, "content", field + ".content", json::value_t::string).get<std::string>();
    if (id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > kMaxId) {
      fail(field + ".id", "must be a token id 0.." + std::to_string(kMaxId) + ", got " + id.dump());
    }
    if (content.empty()) fail(field + ".content", "must not be empty");
    for (const char* key : {"lstrip", "rstrip", "single_word"}) check_off(token, key, field + "." + key);
    // Sharing an id is fine for the same text (GPT-2 lists <|endoftext|> in
    // both); for another text, decoding would not give back what was encoded.
    const int t = id.get<int>();
    if (t < vocabulary() && id_known_[t] && id_bytes_[t] != content) {
      fail(field + ".id", std::to_string(t) + " is already the id of " + in_quotes(id_bytes_[t]) + ", not of " +
                              in_quotes(content));
    }
    added_.push_back({content, t});
    set_id_text(t, content, false);
  }
  std::stable_sort(added_.begin(), added_.end(),
                   [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
}

const ByteLevelBpe::Added* ByteLevelBpe::added_at(std::string_view text, std::size_t i) const {
  for (const Added& token : added_) {
    if (text.substr(i).starts_with(token.content)) return &token;
  }
  return nullptr;
}

std::vector<int> ByteLevelBpe::encode(std::string_view text) const {
  std::vector<int> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size();) {
    const Added* token = added_.empty() ? nullptr : added_at(text, i);
    if (token == nullptr) {
      ++i;
      continue;
    }
    encode_segment(text.substr(start, i - start), out);
    out.push_back(token->id);
    i += token->content.size();
    start = i;
  }
  encode_segment(text.substr(start), out);
  return out;
}

void ByteLevelBpe::encode_segment(std::string_view segment, std::vector<int>& out) const {
  if (segment.empty()) return;
  std::string prefixed;
  if (add_prefix_space_ && segment.front() != ' ') {
    prefixed.assign(1, ' ').append(segment);
    segment = prefixed;
  }
  if (!use_regex_) return encode_piece(segment, out);
  for (const std::string_view piece : gpt2_pre_tokenize(segment)) encode_piece(piece, out);
}

// Merges on a linked list of symbols with a queue of candidate pairs ordered
// by (rank, position), as the library does: the same merges in the same
// order, and long pieces (a line of 10,000 '=') stay O(n log n).
void ByteLevelBpe::encode_piece(std::string_view piece, std::vector<int>& out) const {
  if (ignore_merges_) {
    std::string token;
    for (const char b : piece) append_utf8(token, byte_chars_[static_cast<unsigned char>(b)]);
    if (const auto it = vocab_.find(token); it != vocab_.end()) return out.push_back(it->second);
  }
  const int n = static_cast<int>(piece.size());
  std::vector<int> id(n), next(n), prev(n);
  for (int i = 0; i < n; ++i) {
    id[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  struct Candidate {
    int rank, position, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : position > o.position; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto propose = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    const auto it = merges_.find(static_cast<std::uint64_t>(id[left]) << 32 | static_cast<std::uint32_t>(id[next[left]]));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.merged});
  };
  for (int i = 0; i + 1 < n; ++i) propose(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const int left = top.position, right = next[left];
    if (id[left] < 0 || right < 0) continue;  // merged away since it was queued
    const auto it = merges_.find(static_cast<std::uint64_t>(id[left]) << 32 | static_cast<std::uint32_t>(id[right]));
    if (it == merges_.end() || it->second.merged != top.merged) continue;  // the pair changed
    id[left] = top.merged;
    id[right] = -1;
    next[left] = next[right];
    if (next[left] >= 0) prev[next[left]] = left;
    propose(prev[left]);
    propose(left);
  }
  for (int i = 0; i >= 0 && n > 0; i = next[i]) out.push_back(id[i]);
}

std::string ByteLevelBpe::decode(std::span<const int> tokens) const {
  std::string text;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const int t = tokens[i];
    if (t < 0 || t >= vocabulary() || !id_known_[t]) {
      throw InputError(origin_ + ": token " + std::to_string(i) + " is id " + std::to_string(t) +
                       ", which the tokenizer does not have (ids 0.." + std::to_string(vocabulary() - 1) + ")");
    }
    text += id_bytes_[t];
  }
  return text;
}

}  // namespace

std::unique_ptr<Tokenizer> bpe_tokenizer_from_json(const std::string& file_text, const std::string& origin) {
  return std::make_unique<ByteLevelBpe>(file_text, origin);
}

}  // namespace geotrain::io
