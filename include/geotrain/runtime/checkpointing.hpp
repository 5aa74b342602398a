// Between a rank's stage (parameters, AdamW moments, data sampler) and the
// checkpoint file (io/checkpoint.hpp): collecting the stage's tensors by
// global name, restoring them into any layout, and where a job's pieces go
// (one writer: the single rank, or rank 0 after a gather under MPI; or, in the
// sharded form, one replica of each stage), in the background.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "geotrain/common/background_worker.hpp"
#include "geotrain/common/run_choices.hpp"

#include "geotrain/io/checkpoint.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"
#include "geotrain/model/optimizer.hpp"

namespace geotrain::runtime {

// This stage's tensors with their moments. `skip_tied_copy`: leave out wte
// (the last stage's copy of the tied embedding, equal to the first's).
// `borrow` where the backend's memory is the host's (the CPU): the tensors
// point at the live parameters and moments instead of copies (no snapshot
// in memory, no copy on the training thread); the optimizer must not step
// until they are written (CheckpointSink::await_local_write).
std::vector<io::CheckpointTensor> collect_tensors(model::Stage& stage, model::AdamW& optimizer,
                                                  kernels::Backend& backend, bool skip_tied_copy, bool borrow = false);

// Tensor parallelism: collect_tensors' slices put together into whole
// tensors by a sum over the unit (collective: every rank of `group` calls
// it with its own), so that checkpoints do not depend on t. The unit's
// rank 0 gets every tensor, the others none.
std::vector<io::CheckpointTensor> whole_tensors(const model::Stage& stage, std::vector<io::CheckpointTensor> tensors,
                                               model::TensorGroup& group);

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

// The replica of a stage that writes (or sends, in the single form) its
// tensors: stage s by replica s mod replicas, so that the writes spread over
// the replicas (and their sites) instead of all falling to replica 0.
inline int writing_replica(int stage, int replicas) { return stage % replicas; }

// What decides how a job can write its checkpoints.
struct CheckpointPremises {
  int ranks = 1;                    // training ranks
  bool shared_folder = true;        // every rank sees the files every other writes in checkpoint.dir
  bool sites_share_folder = true;   // within each site, the ranks see each other's files
  bool parallel_io = false;         // parallel HDF5 built in and MPI_THREAD_MULTIPLE given
  std::string folder_note;          // which ranks do not share the folder, for the errors
};

// checkpoint.form as the job writes it. One rank: auto and parallel are
// single (the same file), per_site is sharded (one shard). Several: auto is
// parallel on a shared folder (sharded without parallel I/O), per_site
// where only each site's ranks share it. Throws InputError naming
// checkpoint.form when the form cannot work on these premises.
CheckpointForm resolve_checkpoint_form(CheckpointForm configured, const CheckpointPremises& premises);

// The forms that write a folder of shards and a manifest (io::step_name's `sharded`).
inline bool writes_folder(CheckpointForm form) {
  return form == CheckpointForm::sharded || form == CheckpointForm::per_site;
}

// Receives each rank's part of a checkpoint at a step boundary and makes it
// durable in the background; finish() waits for it and makes it visible.
class CheckpointSink {
 public:
  virtual ~CheckpointSink() = default;
  // Collective: every rank hands its part (`tensors` empty on ranks that do
  // not write their stage: see writing_replica). Returns once the sink owns
  // a snapshot; the write goes on in the background. At most one checkpoint
  // is in flight: call finish() before the next save().
  virtual void save(io::Checkpoint metadata, std::vector<io::CheckpointTensor> tensors) = 0;
  // This rank is still writing (local: no communication).
  virtual bool writing() const = 0;
  // A checkpoint was saved and is not visible yet.
  virtual bool in_flight() const = 0;
  // Collective, best called once writing() is false on every rank (else it
  // waits): takes the checkpoint in flight one phase on and returns its path
  // once it is visible (`latest` names it), "" before that. Phases: every
  // rank's part written; sharded, then rank 0's manifest (in the background
  // too: writing() turns true on rank 0 again). A failed write throws
  // RunError naming the file (one rank), or under MPI one rank prints it and
  // every rank throws ReportedFailure.
  virtual std::string advance() = 0;
  // Local: blocks until the writer has read every tensor of this rank's
  // own part (its errors are reported by advance()); what save() borrowed
  // may change after it. The part may not be on disk yet.
  virtual void await_local_write() = 0;
  // What the last save() sent to another rank over the network (the single
  // form's gather), for the timing file: bytes, and that rank (-1: none).
  virtual std::int64_t sent_bytes() const { return 0; }
  virtual int sent_to() const { return -1; }
  // Collective: waits for the checkpoint in flight on every rank, through
  // every phase; its path ("" when none is in flight).
  std::string finish() {
    std::string path;
    while (in_flight() && path.empty()) path = advance();
    return path;
  }
};

// One rank: writes the file (or shard and manifest) itself.
class LocalCheckpointSink : public CheckpointSink {
 public:
  LocalCheckpointSink(std::string dir, int keep, bool sharded) : dir_(std::move(dir)), keep_(keep), sharded_(sharded) {}
  void save(io::Checkpoint metadata, std::vector<io::CheckpointTensor> tensors) override;
  bool writing() const override { return worker_.busy(); }
  bool in_flight() const override { return !pending_.empty(); }
  std::string advance() override;  // one phase: the file, or the shard and the manifest
  void await_local_write() override {
    if (loan_) loan_->wait();
  }

 private:
  std::string dir_;
  int keep_;
  bool sharded_;
  std::string pending_;  // the path of the checkpoint in flight
  std::shared_ptr<Loan> loan_;  // the write in flight reads the tensors save() was given until it gives them back
  BackgroundWorker worker_;
};

}  // namespace geotrain::runtime
