#include "geotrain/runtime/checkpointing.hpp"

#include <filesystem>
#include <utility>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/parallel_checkpoint.hpp"

namespace geotrain::runtime {

std::vector<io::CheckpointTensor> collect_tensors(model::Stage& stage, model::AdamW& optimizer,
                                                  kernels::Backend& backend, bool skip_tied_copy, bool borrow) {
  std::vector<io::CheckpointTensor> tensors;
  borrow = borrow && backend.kind() == kernels::DeviceKind::cpu;
  for (const model::ParameterView& view : stage.parameters()) {
    if (skip_tied_copy && view.name == "wte") continue;
    io::CheckpointTensor t;
    t.name = view.name;
    t.shape = view.local_shape();  // a tensor-parallel slice: whole_tensors() puts it together
    if (borrow && !view.slice.split()) {
      t.borrowed_value = stage.params() + view.offset;
      t.borrowed_first_moment = optimizer.first_moment() + view.offset;
      t.borrowed_second_moment = optimizer.second_moment() + view.offset;
      tensors.push_back(std::move(t));
      continue;
    }
    for (auto [target, source] : {std::pair{&t.value, stage.params()}, std::pair{&t.first_moment, optimizer.first_moment()},
                                  std::pair{&t.second_moment, optimizer.second_moment()}}) {
      target->resize(view.count);
      backend.download(target->data(), source + view.offset, view.count);
    }
    tensors.push_back(std::move(t));
  }
  return tensors;
}

std::vector<io::CheckpointTensor> whole_tensors(const model::Stage& stage, std::vector<io::CheckpointTensor> tensors,
                                               model::TensorGroup& group) {
  std::vector<io::CheckpointTensor> whole;
  for (io::CheckpointTensor& t : tensors) {
    const model::ParameterView* view = stage.find(t.name);
    if (view == nullptr || !view->slice.split()) {
      if (group.rank() == 0) whole.push_back(std::move(t));
      continue;
    }
    // Each rank's slice in place in a zero tensor; the sum over the group is the whole.
    io::CheckpointTensor joined;
    joined.name = t.name;
    joined.shape = view->shape;
    for (auto [target, part] : {std::pair{&joined.value, &t.value}, std::pair{&joined.first_moment, &t.first_moment},
                                std::pair{&joined.second_moment, &t.second_moment}}) {
      target->assign(view->whole_count(), 0.0f);
      model::copy_slice_in(view->slice, view->shape, part->data(), target->data());
      part->clear();
      part->shrink_to_fit();
      group.sum_host(target->data(), target->size());
    }
    if (group.rank() == 0) whole.push_back(std::move(joined));
  }
  return whole;
}

void check_checkpoint_fits(const io::Checkpoint& checkpoint, const ModelShape& want, const std::string& path) {
  const ModelShape& have = checkpoint.model;
  const std::pair<const char*, std::pair<int, int>> fields[] = {
      {"model_layers", {have.layers, want.layers}},       {"model_hidden", {have.hidden, want.hidden}},
      {"model_heads", {have.heads, want.heads}},          {"model_vocabulary", {have.vocabulary, want.vocabulary}},
      {"model_sequence_length", {have.sequence_length, want.sequence_length}}};
  for (const auto& [name, values] : fields) {
    if (values.first != values.second) {
      throw InputError(path + ": attribute " + name + ": the checkpoint has " + std::to_string(values.first) +
                       " but the model being trained has " + std::to_string(values.second) +
                       " (a checkpoint of another model?)");
    }
  }
  if (have.tied_head != want.tied_head) {
    const char* name[] = {"untied", "tied"};
    throw InputError(path + ": attribute model_lm_head: the checkpoint's LM head is " + name[have.tied_head] +
                     " but the model being trained has a " + name[want.tied_head] + " one (model.lm_head)");
  }
  for (const model::ParameterView& view : model::parameter_layout(want, model::StageSpec::whole(want))) {
    const io::CheckpointTensor* t = checkpoint.find(view.name);
    if (t == nullptr) throw InputError(path + ": /params/" + view.name + ": missing (a checkpoint of another model?)");
    if (t->shape != view.shape || t->value.size() != view.count) {
      throw InputError(path + ": /params/" + view.name + ": shape differs from the model's");
    }
  }
}

// One parameter (or moment) of `view` from the whole tensor: a
// tensor-parallel rank takes its slice.
static void upload_view(const model::ParameterView& view, kernels::Backend& backend, const std::vector<float>& whole,
                        float* device_buffer) {
  if (!view.slice.split()) {
    backend.upload(device_buffer + view.offset, whole.data(), view.count);
    return;
  }
  std::vector<float> part(view.count);
  model::copy_slice_out(view.slice, view.shape, whole.data(), part.data());
  backend.upload(device_buffer + view.offset, part.data(), view.count);
}

// Every parameter of `stage` from the checkpoint's tensor of the same name
// (already checked to be there); a tensor longer than the view (wpe of a
// longer context) gives its first rows.
static void upload_parameters(model::Stage& stage, kernels::Backend& backend, const io::Checkpoint& checkpoint) {
  for (const model::ParameterView& view : stage.parameters()) {
    upload_view(view, backend, checkpoint.find(view.name)->value, stage.params());
  }
}

void restore_weights(model::Stage& stage, kernels::Backend& backend, const io::Checkpoint& checkpoint,
                     const std::string& path) {
  check_checkpoint_fits(checkpoint, stage.config(), path);
  upload_parameters(stage, backend, checkpoint);
}

void restore_tensors(model::Stage& stage, model::AdamW& optimizer, kernels::Backend& backend,
                     const io::Checkpoint& checkpoint, const std::string& path) {
  if (checkpoint.weights_only) {
    throw InputError(path + ": attribute weights_only: no optimizer state to resume (use checkpoint.init_from)");
  }
  restore_weights(stage, backend, checkpoint, path);
  for (const model::ParameterView& view : stage.parameters()) {
    const io::CheckpointTensor* t = checkpoint.find(view.name);
    upload_view(view, backend, t->first_moment, optimizer.first_moment());
    upload_view(view, backend, t->second_moment, optimizer.second_moment());
  }
}

void restore_parameters(model::Stage& stage, kernels::Backend& backend, const io::Checkpoint& checkpoint,
                        const std::string& path) {
  ModelShape longest = stage.config();
  longest.sequence_length = checkpoint.model.sequence_length;
  check_checkpoint_fits(checkpoint, longest, path);
  if (stage.config().sequence_length > longest.sequence_length) {
    throw InputError(path + ": attribute model_sequence_length: the checkpoint has " +
                     std::to_string(longest.sequence_length) + " positions but " +
                     std::to_string(stage.config().sequence_length) + " are asked for");
  }
  // Row-major [T, C]: a shorter context's wpe is the first rows, i.e. the
  // first view.count floats; every other tensor has the same size.
  upload_parameters(stage, backend, checkpoint);
}

CheckpointForm resolve_checkpoint_form(CheckpointForm configured, const CheckpointPremises& p) {
  if (p.ranks <= 1) {
    if (configured == CheckpointForm::per_site) return CheckpointForm::sharded;
    return configured == CheckpointForm::sharded ? configured : CheckpointForm::single;
  }
  const std::string no_parallel_io =
      "needs parallel HDF5 and MPI_THREAD_MULTIPLE (this geotrain has " +
      std::string(io::parallel_hdf5_built() ? "parallel HDF5 but MPI gave a lower thread level"
                                            : "the serial HDF5 library: install libhdf5-openmpi-dev and rebuild") +
      ")";
  const std::string not_shared = " (" + p.folder_note + ")";
  const std::string unshared = "checkpoint.dir must be one folder that every rank shares" + not_shared;
  // The configured form's premise: "checkpoint.form = <form>: <why not>" unless it holds.
  auto require = [&](bool holds, const std::string& why_not) {
    if (!holds) throw InputError("checkpoint.form = " + to_string(configured) + ": " + why_not);
  };
  switch (configured) {
    case CheckpointForm::single:
      return configured;  // rank 0 writes everything: any file system
    case CheckpointForm::sharded:
      require(p.shared_folder, unshared + "; use per_site, or single");
      return configured;
    case CheckpointForm::parallel:
      require(p.parallel_io, no_parallel_io + "; use sharded or single");
      require(p.shared_folder, unshared + "; use per_site");
      return configured;
    case CheckpointForm::per_site:
      require(p.parallel_io, no_parallel_io + "; use sharded or single");
      require(p.sites_share_folder, "the ranks of a site must share checkpoint.dir" + not_shared);
      return configured;
    case CheckpointForm::automatic:
      if (p.shared_folder) return p.parallel_io ? CheckpointForm::parallel : CheckpointForm::sharded;
      if (p.parallel_io && p.sites_share_folder) return CheckpointForm::per_site;
      throw InputError("checkpoint.form = auto: checkpoint.dir is not one folder that every rank shares" + not_shared +
                       (p.parallel_io ? ", nor shared within each site" : "") +
                       "; give a shared folder, or checkpoint.form = single" +
                       (p.parallel_io ? "" : " (per_site " + no_parallel_io + ")"));
  }
  return configured;
}

void LocalCheckpointSink::save(io::Checkpoint metadata, std::vector<io::CheckpointTensor> tensors) {
  metadata.tensors = std::move(tensors);
  pending_ = (std::filesystem::path(dir_) / io::step_name(metadata.completed_steps, sharded_)).string();
  // Shared: std::function must be copyable; the job is its only other owner.
  auto snapshot = std::make_shared<const io::Checkpoint>(std::move(metadata));
  loan_ = std::make_shared<Loan>();
  worker_.start(lend(loan_, [snapshot, dir = dir_, keep = keep_, sharded = sharded_, loan = loan_] {
    auto give_back = [&] { loan->give_back(); };
    if (!sharded) {
      io::save_checkpoint(dir, *snapshot, keep, give_back);
      return;
    }
    io::write_checkpoint_shard(dir, *snapshot, 0, give_back);
    io::publish_sharded_checkpoint(dir, *snapshot, {io::shard_name(0)}, keep, {io::shard_name(0)});
  }));
}

std::string LocalCheckpointSink::advance() {
  if (pending_.empty()) return "";
  try {
    worker_.wait();
  } catch (const std::exception& e) {
    pending_.clear();
    throw RunError(std::string("checkpoint not written: ") + e.what());
  }
  return std::exchange(pending_, "");
}

}  // namespace geotrain::runtime
