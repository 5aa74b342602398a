// Checkpoints: HDF5, one self-contained file per checkpoint or (sharded form)
// one folder of shards plus a manifest.
//
// Layout (format version 2; `h5dump -H FILE` shows it):
//   /params/<name>           float32, the parameter's global shape, e.g. /params/h.3.attn.qkv.weight [384, 128]
//   /optimizer/m/<name>      AdamW first moment, same shape
//   /optimizer/v/<name>      AdamW second moment, same shape
//   attributes of /:         format_version, completed_steps, sampler_seed,
//                            sampler_epoch, sampler_position, model_name,
//                            model_layers, model_hidden, model_heads,
//                            model_vocabulary, model_sequence_length,
//                            config (the run's "section.key = value" lines),
//                            plan (text), writer ("geotrain 0.1.0")
// Names are global (independent of the pipeline cut), so a checkpoint
// written by one layout loads into any other.
//
// Checksums (version 2): every tensor dataset is checked on every read.
// Every form stores contiguous datasets with an attribute crc32 (zlib's
// CRC-32 of the little-endian float32 bytes), computed on a helper thread
// while the bytes are written. The first version 2 writers chunked the
// files one process wrote (at most 2^18 floats a chunk) with HDF5's
// Fletcher32 filter instead; such files are still read and verified. A
// tensor with neither, or whose bytes fail it, is an InputError naming the
// file and the dataset.
//
// Compressed data-parallel gradients (compression.gradients != fp32) add
// every rank's error-feedback residuals, which differ between replicas:
//   /error_feedback/<stage layers>.replica_<r>.<part>   float32 [count]
//   attribute layout of /error_feedback: the wire format and replica count
//                            they were built for (a resume elsewhere starts
//                            them at zero).
//
// Weights only (a converted model, `geotrain convert --from-hf`): attribute
// weights_only = 1, no /optimizer group, completed_steps and the sampler
// state 0. Such a file starts a run (checkpoint.init_from) but cannot be
// resumed; without the attribute, /optimizer is required as before.
//
// Two forms (checkpoint.form):
//  - single: one file, written by one process (alone, or rank 0 after
//    gathering the stages): what h5py, PyTorch and users open most simply;
//    one atomic rename makes it appear whole.
//  - sharded: a folder step_<N>/ per checkpoint, written where the data
//    lives: one shard file per writing rank, rank_<R>.h5, with the format
//    above but only the root attributes format_version, completed_steps and
//    shard = 1, and only the tensors (and residuals) that rank holds; then
//    manifest.h5, written last: the root attributes of a single file plus
//    `shards` (the shard file names, one per line). A folder without a
//    manifest is incomplete; `latest` names only complete ones.
// read_checkpoint reads both.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "geotrain/io/token_shard.hpp"
#include "geotrain/common/model_shape.hpp"

namespace geotrain::io {

inline constexpr int kCheckpointFormatVersion = 2;

// The floats a tensor of `shape` holds (1 for a scalar's empty shape).
inline std::size_t element_count(const std::vector<int>& shape) {
  std::size_t n = 1;
  for (int d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

struct CheckpointTensor {
  std::string name;
  std::vector<int> shape;
  std::vector<float> value, first_moment, second_moment;  // each product(shape) floats; moments empty: weights only
  // Borrowed instead of owned (writing only): the training's own host
  // memory, product(shape) floats each (moments null: weights only), which
  // must stay unchanged until the write is done; the vectors stay empty.
  const float* borrowed_value = nullptr;
  const float* borrowed_first_moment = nullptr;
  const float* borrowed_second_moment = nullptr;
  // The floats to write: borrowed where set, else owned.
  std::span<const float> values() const { return view(borrowed_value, value); }
  std::span<const float> first_moments() const { return view(borrowed_first_moment, first_moment); }
  std::span<const float> second_moments() const { return view(borrowed_second_moment, second_moment); }

 private:
  std::span<const float> view(const float* borrowed, const std::vector<float>& owned) const {
    return borrowed == nullptr ? std::span<const float>(owned) : std::span<const float>(borrowed, element_count(shape));
  }
};

struct Checkpoint {
  int format_version = kCheckpointFormatVersion;
  std::int64_t completed_steps = 0;
  std::int64_t global_batch_sequences = 0;  // of the run that wrote it; 0: not recorded (older files)
  SamplerState sampler;
  ModelShape model;
  std::string config_text;     // the run's settings as the user wrote them (TOML)
  std::string layout_text;     // how the run cut up a step (TOML, runtime::describe(StepLayout)); "": older files
  std::string plan_text;
  std::string tokenizer_text;  // the training data's tokenizer file; "" = the byte tokenizer
  bool weights_only = false;   // no optimizer moments (see above)
  std::vector<CheckpointTensor> tensors;
  // Error-feedback residuals: value only (moments empty), shape {count}.
  std::string residual_layout;
  std::vector<CheckpointTensor> residuals;
  const CheckpointTensor* find(const std::string& name) const;
};

// Writes `path` (overwriting it). Throws RunError naming the path on failure.
void write_checkpoint_file(const std::string& path, const Checkpoint& checkpoint);

// Reads either form: a single file, or a step folder (or its manifest.h5)
// and every shard its manifest lists (a missing one: InputError naming it).
Checkpoint read_checkpoint(const std::string& path);

// The root attributes only (model, step, config, tokenizer; no tensor) of
// either form: what a command needs to know the checkpoint's model before
// it reads the tensors. Throws InputError naming the file.
Checkpoint read_checkpoint_header(const std::string& path);

// Reads and checks a single-file checkpoint: an HDF5 file, the format version, every
// attribute, and for every /params tensor its two moments with the same
// shape (unless weights_only). Throws InputError "<path>: <field>: <what>".
Checkpoint read_checkpoint_file(const std::string& path);

// Tensors to bytes and back (for gathering stages to the writing rank);
// a tensor's moments are either both empty or both product(shape) floats.
std::vector<std::uint8_t> serialize_tensors(const std::vector<CheckpointTensor>& tensors);
// Throws std::invalid_argument on malformed bytes.
std::vector<CheckpointTensor> deserialize_tensors(const std::vector<std::uint8_t>& bytes);

// A checkpoint directory: step_00000100.h5 files or step_00000100/ folders
// (sharded) and a `latest` file naming the newest complete one.
//
// save_checkpoint: writes <dir>/step_<N>.h5.tmp, flushes it to disk (fsync),
// renames it, fsyncs the directory, then replaces `latest` the same way, and
// finally deletes all but the newest `keep` checkpoints (and incomplete
// folders older than this one). A crash at any moment leaves `latest`
// naming a complete checkpoint. Returns the file's path.
//
// `tensors_written` (the writers below take one too) is called once every
// tensor's bytes are in the file, before the flush to disk: from then on
// the caller may change what the tensors borrow (CheckpointTensor's
// borrowed_* pointers: the live parameters) while the write goes on.
using TensorsWritten = std::function<void()>;
std::string save_checkpoint(const std::string& dir, const Checkpoint& checkpoint, int keep,
                            const TensorsWritten& tensors_written = {});

// "step_00000100.h5" (single) or "step_00000100" (the sharded form's folder).
std::string step_name(std::int64_t completed_steps, bool sharded);
// "rank_00003.h5": the shard written by world rank 3.
std::string shard_name(int rank);

// "site_02_london.h5": the per-site form's shard of site number 2 (`site`
// with every character but letters, digits, '-' and '.' made '_').
std::string site_shard_name(int site_index, const std::string& site);

// The last part of a single file written elsewhere (the parallel form, by
// io/parallel_checkpoint.hpp): fsyncs `dir`, points `latest` at `name`
// (step_name's), prunes as save_checkpoint does.
void publish_checkpoint(const std::string& dir, const std::string& name, int keep);

// The sharded form, in two parts. First every writing rank writes its part
// (part.tensors, part.residuals; the other fields but completed_steps are
// not stored) to <dir>/step_<N>/rank_<R>.h5 (tmp, fsync, rename); returns
// its path. Throws RunError naming the file.
std::string write_checkpoint_shard(const std::string& dir, const Checkpoint& part, int rank,
                                   const TensorsWritten& tensors_written = {});
// Then, once every shard is written, one process checks each of `present`
// (file names in the step's folder: those written where this process sees
// them; all of `shards` on a shared file system) is there (RunError naming a
// missing one), writes manifest.h5 listing `shards` from `metadata` (tmp,
// fsync, rename), replaces `latest` and prunes as save_checkpoint does.
// Returns the folder's path. Without a shared file system (the per-site
// form across sites) one process of each file system publishes its copy.
std::string publish_sharded_checkpoint(const std::string& dir, const Checkpoint& metadata,
                                       const std::vector<std::string>& shards, int keep,
                                       const std::vector<std::string>& present);

// The shards that <folder>/manifest.h5 lists (file names in `folder`),
// without reading them. Throws InputError naming the manifest.
std::vector<std::string> listed_shards(const std::string& folder);

// Writes `bytes` to `path` the way every checkpoint file is written:
// `path`.tmp, flushed to disk, then renamed, so that a reader never sees a
// partly written file under its final name. Throws RunError naming the file.
void write_file_durably(const std::string& path, std::span<const std::uint8_t> bytes);

// "auto": the checkpoint `latest` names in `dir` ("" when there is none
// yet); anything else: that path. Throws InputError when `latest` names a
// missing file or a folder without its manifest.
std::string resolve_resume(const std::string& dir, const std::string& resume);

}  // namespace geotrain::io
