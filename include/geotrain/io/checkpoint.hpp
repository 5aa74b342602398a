// Checkpoints: one self-contained HDF5 file per checkpoint.
//
// Layout (format version 1; `h5dump -H FILE` shows it):
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
// One writer per job (rank 0 after gathering the stages): one file is what
// h5py, PyTorch and users open, and one atomic rename makes it appear whole.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "geotrain/io/token_shard.hpp"
#include "geotrain/common/model_shape.hpp"

namespace geotrain::io {

inline constexpr int kCheckpointFormatVersion = 1;

struct CheckpointTensor {
  std::string name;
  std::vector<int> shape;
  std::vector<float> value, first_moment, second_moment;  // each product(shape) floats; moments empty: weights only
};

struct Checkpoint {
  int format_version = kCheckpointFormatVersion;
  std::int64_t completed_steps = 0;
  std::int64_t global_batch_sequences = 0;  // of the run that wrote it; 0: not recorded (older files)
  SamplerState sampler;
  ModelShape model;
  std::string config_text;
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

// Reads and checks a checkpoint: an HDF5 file, the format version, every
// attribute, and for every /params tensor its two moments with the same
// shape (unless weights_only). Throws InputError "<path>: <field>: <what>".
Checkpoint read_checkpoint_file(const std::string& path);

// Tensors to bytes and back (for gathering stages to the writing rank);
// a tensor's moments are either both empty or both product(shape) floats.
std::vector<std::uint8_t> serialize_tensors(const std::vector<CheckpointTensor>& tensors);
// Throws std::invalid_argument on malformed bytes.
std::vector<CheckpointTensor> deserialize_tensors(const std::vector<std::uint8_t>& bytes);

// A checkpoint directory: step_00000100.h5 files and a `latest` file naming
// the newest complete one.
//
// save_checkpoint: writes <dir>/step_<N>.h5.tmp, flushes it to disk (fsync),
// renames it, fsyncs the directory, then replaces `latest` the same way, and
// finally deletes all but the newest `keep` step files. A crash at any
// moment leaves `latest` naming a complete file. Returns the file's path.
std::string save_checkpoint(const std::string& dir, const Checkpoint& checkpoint, int keep);

// "auto": the file `latest` names in `dir` ("" when there is none yet);
// anything else: that path. Throws InputError when `latest` names a missing file.
std::string resolve_resume(const std::string& dir, const std::string& resume);

}  // namespace geotrain::io
