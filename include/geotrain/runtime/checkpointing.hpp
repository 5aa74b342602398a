// Between a rank's stage (parameters, AdamW moments, data sampler) and the
// checkpoint file (io/checkpoint.hpp): collecting the stage's tensors by
// global name, restoring them into any layout, and where a job's pieces go
// (one writer: the single rank, or rank 0 after a gather under MPI).
#pragma once
#include <string>
#include <vector>

#include "geotrain/io/checkpoint.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"
#include "geotrain/model/optimizer.hpp"

namespace geotrain::runtime {

// This stage's tensors with their moments. `skip_tied_copy`: leave out wte
// (the last stage's copy of the tied embedding, equal to the first's).
std::vector<io::CheckpointTensor> collect_tensors(model::Stage& stage, model::AdamW& optimizer,
                                                  kernels::Backend& backend, bool skip_tied_copy);

// Throws InputError naming `path` and the attribute or dataset when
// `checkpoint` is not of `model` (shape attributes, every tensor of the whole
// model present at its shape). Every rank checks before planning, so a wrong
// checkpoint stops the job as bad input, not mid-start-up.
void check_checkpoint_fits(const io::Checkpoint& checkpoint, const ModelShape& model, const std::string& path);

// Loads every parameter of `stage` and its moments from `checkpoint` by
// name; `path` names the file in errors. Throws InputError when the model
// shape differs, a tensor is missing or has another shape, or the file holds
// weights only.
void restore_tensors(model::Stage& stage, model::AdamW& optimizer, kernels::Backend& backend,
                     const io::Checkpoint& checkpoint, const std::string& path);

// The parameters only (checkpoint.init_from): any checkpoint, with or
// without moments. Same checks and errors as restore_tensors otherwise.
void restore_weights(model::Stage& stage, kernels::Backend& backend, const io::Checkpoint& checkpoint,
                     const std::string& path);

// The parameters only, for inference (sampling, evaluation): the moments
// are neither read nor needed. `stage` may see fewer positions than the
// checkpoint's model (sampling a short text): it takes the first rows of
// wpe. Throws InputError naming `path` when the checkpoint lacks a tensor of
// its own model or has another shape, or `stage` is not of that model.
void restore_parameters(model::Stage& stage, kernels::Backend& backend, const io::Checkpoint& checkpoint,
                        const std::string& path);

// Receives each rank's part of a checkpoint at a step boundary and makes
// it durable. Collective: every rank calls save() with its own part
// (`tensors` empty on ranks that hold copies: data-parallel replicas > 0).
class CheckpointSink {
 public:
  virtual ~CheckpointSink() = default;
  // Returns the path written (on every rank).
  virtual std::string save(io::Checkpoint metadata, std::vector<io::CheckpointTensor> tensors) = 0;
};

// One rank: writes the file itself.
class LocalCheckpointSink : public CheckpointSink {
 public:
  LocalCheckpointSink(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {}
  std::string save(io::Checkpoint metadata, std::vector<io::CheckpointTensor> tensors) override;

 private:
  std::string dir_;
  int keep_;
};

}  // namespace geotrain::runtime
