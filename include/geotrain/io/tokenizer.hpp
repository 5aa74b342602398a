// Text <-> token ids, for the tools around training (sampling, evaluation
// prompts, data preparation). The tokenizer travels with the data: a token
// shard `X.bin` was made with the tokenizer file beside it (see
// tokenizer_for_shard); no file there means the byte tokenizer, which is how
// the shipped corpus (inputs/data) is tokenized. A checkpoint keeps the text
// of its training data's tokenizer file, so sampling decodes with the
// tokenizer the model was trained with.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace geotrain::io {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int> encode(std::string_view text) const = 0;
  // Throws InputError naming the position of an id outside the vocabulary.
  virtual std::string decode(std::span<const int> tokens) const = 0;
  virtual int vocabulary() const = 0;
  // "byte", or the kind and origin of a tokenizer file, for messages.
  virtual std::string description() const = 0;
};

std::unique_ptr<Tokenizer> make_byte_tokenizer();

// The tokenizer file that belongs to a token shard (its folder's
// tokenizer.json), "" where there is none (the byte tokenizer).
std::string tokenizer_file_for_shard(const std::string& shard_path);

// A tokenizer from the text of a tokenizer file: "" = the byte tokenizer,
// otherwise a Hugging Face tokenizers JSON file of a byte-level BPE (GPT-2's
// kind; io/bpe_tokenizer.hpp says what is read). `origin` names the file (or
// checkpoint) in error messages.
std::unique_ptr<Tokenizer> tokenizer_from_text(const std::string& file_text, const std::string& origin);

// The text of the shard's tokenizer file ("" where there is none), checked
// to load: a broken tokenizer file is bad input before training starts.
std::string tokenizer_text_for_shard(const std::string& shard_path);

// tokenizer_from_text of the shard's tokenizer file.
std::unique_ptr<Tokenizer> tokenizer_for_shard(const std::string& shard_path);

struct Config;

// The training shard's tokenizer text, checked against the run: the
// validation shard has the same tokenizer, and the model's vocabulary covers
// the tokenizer's ids (shards hold ids up to the tokenizer's vocabulary).
// Throws InputError naming data.validation or model.vocabulary.
std::string tokenizer_text_for_training(const Config& config, int model_vocabulary);

}  // namespace geotrain::io
