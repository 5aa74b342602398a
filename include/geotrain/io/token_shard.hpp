// Token shards in the llm.c / nanoGPT ".bin" format, and the training data
// built on them: train and validation token streams with a deterministic,
// seeded batch sampler that data-parallel replicas share.
//
// Shard layout (all little-endian):
//   bytes 0..1023   256 int32: [0] magic 20240520, [1] version 1, [2] token
//                   count N, the rest unused (written as zeros)
//   bytes 1024..    N uint16 token ids
// Version 1 is the only one accepted: llm.c's later version 2 stores uint32
// tokens (for vocabularies over 65536, such as Llama 3's) and is refused with
// a message that says so, rather than read as garbage.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace geotrain::io {

inline constexpr std::int32_t kShardMagic = 20240520;
inline constexpr std::int32_t kShardVersion = 1;
inline constexpr int kShardHeaderInts = 256;
inline constexpr std::size_t kShardHeaderBytes = 1024;  // kShardHeaderInts * 4

// Reads and checks a shard: header present, magic, version, token count > 0,
// file size exactly 1024 + 2 * count, every token < vocab_size (1..65536).
// Throws InputError "<path>: <field>: <what> (<hint>)" for a missing, empty,
// truncated or malformed file and for the first out-of-range token.
std::vector<std::uint16_t> read_token_shard(const std::string& path, int vocab_size);

// Writes a version-1 shard (header zeros past [2]). Throws
// std::invalid_argument for no tokens or more than INT32_MAX, RunError when the
// file cannot be written. The bytes equal those of inputs/data/make_corpus.sh.
void write_token_shard(const std::string& path, std::span<const std::uint16_t> tokens);

// Where the training sampler stands: enough to continue a run exactly
// (saved in checkpoints). `position` counts sequences of the current epoch's
// shuffled order already handed out to all replicas together.
struct SamplerState {
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  std::int64_t position = 0;
  friend bool operator==(const SamplerState&, const SamplerState&) = default;
};

// One batch: B sequences of T tokens, row-major (index b * T + t);
// targets[b * T + t] is the token after inputs[b * T + t].
struct TokenBatch {
  std::vector<int> inputs;
  std::vector<int> targets;
};

// Train and validation token streams plus the batch sampler.
//
// Sequences are windows of T + 1 tokens that start every T tokens (window k
// covers tokens k*T .. k*T+T), so the inputs of different windows never
// overlap and every token but the first is a target once per epoch.
//
// Training order: each epoch is a permutation of all windows, shuffled with a
// seed derived from (seed, epoch) by a generator defined here (not the
// standard library's distributions), so it is the same on every platform and
// compiler. A global batch is the next R*B windows of that order (R = replicas,
// B = sequences per replica); replica r takes windows r*B .. r*B+B-1 of it,
// so replicas read disjoint slices and together read the whole global batch.
// When fewer than R*B windows are left in an epoch, they are skipped and the
// next epoch begins (reshuffled) - every replica makes the same decision.
//
// Validation order: windows in file order, no shuffling; batch i of replica r
// is windows (i*R + r)*B .. +B-1, so it is the same on every call.
class TokenDataset {
 public:
  // Train and validation from two shard files.
  static TokenDataset from_shards(const std::string& train_path, const std::string& validation_path,
                                  int vocab_size, std::uint64_t seed);
  // One shard split: validation = the last `validation_fraction` (0 < f < 1)
  // of its tokens, training = the rest.
  static TokenDataset from_split(const std::string& path, int vocab_size, double validation_fraction,
                                 std::uint64_t seed);
  // Streams already in memory; the names stand for files in messages.
  TokenDataset(std::vector<std::uint16_t> train, std::vector<std::uint16_t> validation,
               std::uint64_t seed, std::string train_name = "train tokens",
               std::string validation_name = "validation tokens");

  // Data parallelism: this process is replica `replica` of `replicas`
  // (0 <= replica < replicas). Default 0 of 1. Throws std::invalid_argument.
  void set_replica(int replica, int replicas);
  int replica() const { return replica_; }
  int replicas() const { return replicas_; }

  // The next B sequences of T tokens for this replica (vectors resized to
  // B*T). Throws std::invalid_argument for B or T < 1 and InputError (naming
  // the training file) when the data holds fewer windows than one global batch.
  // Resuming needs the same T and R*B as the run that saved the state.
  void next_batch(int B, int T, std::vector<int>& inputs, std::vector<int>& targets);

  // Up to `max_batches` validation batches of this replica (all that fit when
  // max_batches < 1); the same on every call. Throws InputError when the
  // validation data holds fewer windows than one global batch.
  std::vector<TokenBatch> validation_batches(int B, int T, int max_batches) const;

  SamplerState state() const;
  // Continues exactly where `state` was taken. Throws std::invalid_argument
  // for a negative epoch or position.
  void restore(const SamplerState& state);

  const std::vector<std::uint16_t>& train_tokens() const { return train_; }
  const std::vector<std::uint16_t>& validation_tokens() const { return validation_; }
  const std::string& train_name() const { return train_name_; }
  const std::string& validation_name() const { return validation_name_; }

  // Windows of T + 1 tokens (stride T) that `tokens` holds: (size - 1) / T.
  static std::size_t window_count(std::size_t tokens, int T);

 private:
  void build_order(int T);

  std::vector<std::uint16_t> train_;
  std::vector<std::uint16_t> validation_;
  std::string train_name_;
  std::string validation_name_;
  std::uint64_t seed_ = 0;
  std::int64_t epoch_ = 0;
  std::int64_t position_ = 0;
  int replica_ = 0;
  int replicas_ = 1;
  // The current epoch's permutation of window indices, built for order_T_.
  std::vector<std::uint32_t> order_;
  int order_T_ = 0;
  std::int64_t order_epoch_ = -1;
};

}  // namespace geotrain::io
