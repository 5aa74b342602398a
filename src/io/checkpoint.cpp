#include "geotrain/io/checkpoint.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/parallel_checkpoint.hpp"
#include "checkpoint_format.hpp"
#include "hdf5_support.hpp"

namespace geotrain::io {
namespace {

namespace fs = std::filesystem;
using namespace hdf5;

// Far above any tensor of the models geotrain trains (GPT3-XL's largest
// holds 1e8 floats); an 8 GiB tensor is a damaged or foreign file.
constexpr std::uint64_t kMaxTensorElements = std::uint64_t{1} << 31;

std::string shape_text(const std::vector<int>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---- writing

void write_dataset(hid_t group, const std::string& name, const std::vector<int>& shape, std::span<const float> data,
                   const std::string& context) {
  write_array(group, name, std::vector<hsize_t>(shape.begin(), shape.end()), H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
              data.data(), "", context);
}

// ---- reading

// H5Aread fills one value per element: an attribute holding an array (or
// nothing) would overflow the single value read into, or leave it unset.
void require_one_value(hid_t attribute, const std::string& field) {
  Handle space(GT_H5_CHECK(H5Aget_space(attribute), field, true), H5Sclose);
  if (H5Sget_simple_extent_npoints(space) != 1) throw InputError(field + ": must be a single value");
}

// Opens the single-valued attribute `name` of `object` whose type is of class
// `type_class`; *type receives its stored type.
Handle open_scalar_attribute(hid_t object, const char* name, H5T_class_t type_class, const std::string& path,
                             Handle* type) {
  const std::string field = path + ": attribute " + name;
  if (H5Aexists(object, name) <= 0) throw InputError(field + ": missing (not a geotrain checkpoint?)");
  Handle attribute(GT_H5_CHECK(H5Aopen(object, name, H5P_DEFAULT), field, true), H5Aclose);
  require_one_value(attribute, field);
  *type = Handle(GT_H5_CHECK(H5Aget_type(attribute), field, true), H5Tclose);
  if (H5Tget_class(*type) != type_class) {
    throw InputError(field + (type_class == H5T_INTEGER ? ": must be an integer" : ": must be a string"));
  }
  return attribute;
}

std::int64_t read_int_attribute(hid_t object, const char* name, const std::string& path) {
  Handle type;
  const Handle attribute = open_scalar_attribute(object, name, H5T_INTEGER, path, &type);
  std::int64_t value = 0;
  GT_H5_CHECK(H5Aread(attribute, H5T_NATIVE_INT64, &value), path + ": attribute " + name, true);
  return value;
}

std::string read_string_attribute(hid_t object, const char* name, const std::string& path) {
  const std::string field = path + ": attribute " + name;
  Handle type;
  const Handle attribute = open_scalar_attribute(object, name, H5T_STRING, path, &type);
  if (H5Tis_variable_str(type) > 0) {
    Handle memory(utf8_string_type(), H5Tclose);
    char* text = nullptr;
    GT_H5_CHECK(H5Aread(attribute, memory, &text), field, true);
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  const std::size_t size = H5Tget_size(type);
  std::string value(size, '\0');
  GT_H5_CHECK(H5Aread(attribute, type, value.data()), field, true);
  return value.substr(0, value.find('\0'));
}

std::vector<std::string> member_names(hid_t group, const std::string& context) {
  H5G_info_t info;
  GT_H5_CHECK(H5Gget_info(group, &info), context, true);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t length = GT_H5_CHECK(
        H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT), context, true);
    std::string name(static_cast<std::size_t>(length) + 1, '\0');
    GT_H5_CHECK(H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT),
                context, true);
    name.resize(static_cast<std::size_t>(length));
    names.push_back(name);
  }
  return names;
}

// Reads dataset `name` of `group`; its shape into `shape` (checked against
// `expected` when that is not empty).
std::vector<float> read_dataset(hid_t group, const std::string& name, const std::string& field,
                                std::vector<int>& shape, const std::vector<int>& expected) {
  if (H5Lexists(group, name.c_str(), H5P_DEFAULT) <= 0) throw InputError(field + ": missing");
  Handle set(GT_H5_CHECK(H5Dopen2(group, name.c_str(), H5P_DEFAULT), field, true), H5Dclose);
  Handle type(GT_H5_CHECK(H5Dget_type(set), field, true), H5Tclose);
  if (H5Tget_class(type) != H5T_FLOAT) throw InputError(field + ": must hold floating-point numbers");
  Handle space(GT_H5_CHECK(H5Dget_space(set), field, true), H5Sclose);
  const int rank = GT_H5_CHECK(H5Sget_simple_extent_ndims(space), field, true);
  if (rank < 1 || rank > 4) throw InputError(field + ": has " + std::to_string(rank) + " dimensions (1 to 4 expected)");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  GT_H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr), field, true);
  shape.assign(dims.begin(), dims.end());
  for (hsize_t d : dims) {
    if (d == 0 || d > (1u << 30)) throw InputError(field + ": dimension " + std::to_string(d) + " out of range");
  }
  // Checked before anything is allocated for it, and so that the product
  // cannot wrap around to a small buffer that H5Dread would overrun.
  std::uint64_t elements = 1;
  for (hsize_t d : dims) {
    if (elements > kMaxTensorElements / d) {
      throw InputError(field + ": shape " + shape_text(shape) + " has more than 2^31 elements (damaged file?)");
    }
    elements *= d;
  }
  if (!expected.empty() && shape != expected) {
    throw InputError(field + ": shape " + shape_text(shape) + " differs from the parameter's " + shape_text(expected));
  }
  std::vector<float> data(element_count(shape));
  GT_H5_CHECK(H5Dread(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), field, true);
  return data;
}

// /error_feedback (only when there are residuals): one 1-D dataset each.
void write_residuals(hid_t file, const Checkpoint& c, const std::string& context) {
  if (c.residuals.empty()) return;
  Handle group(GT_H5_CHECK(H5Gcreate2(file, "error_feedback", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), context, false),
               H5Gclose);
  write_string_attribute(group, "layout", c.residual_layout, context + ": /error_feedback");
  for (const CheckpointTensor& t : c.residuals) {
    write_dataset(group, t.name, {static_cast<int>(t.value.size())}, t.value, context + ": /error_feedback/" + t.name);
  }
}

void read_residuals(hid_t file, const std::string& path, Checkpoint& c) {
  if (H5Lexists(file, "error_feedback", H5P_DEFAULT) <= 0) return;
  const std::string where = path + ": /error_feedback";
  Handle group(GT_H5_CHECK(H5Gopen2(file, "error_feedback", H5P_DEFAULT), where, true), H5Gclose);
  c.residual_layout = read_string_attribute(group, "layout", where);
  for (const std::string& name : member_names(group, where)) {
    CheckpointTensor t;
    t.name = name;
    t.value = read_dataset(group, name, where + "/" + name, t.shape, {});
    if (t.shape.size() != 1) throw InputError(where + "/" + name + ": must be one-dimensional");
    c.residuals.push_back(std::move(t));
  }
}

// /params of a weights-only file into `c`.
Checkpoint read_weights(hid_t file, const std::string& path, Checkpoint c) {
  if (H5Lexists(file, "params", H5P_DEFAULT) <= 0) throw InputError(path + ": /params: missing");
  Handle params(GT_H5_CHECK(H5Gopen2(file, "params", H5P_DEFAULT), path + ": /params", true), H5Gclose);
  for (const std::string& name : member_names(params, path + ": /params")) {
    CheckpointTensor t;
    t.name = name;
    t.value = read_dataset(params, name, path + ": /params/" + name, t.shape, {});
    c.tensors.push_back(std::move(t));
  }
  if (c.tensors.empty()) throw InputError(path + ": /params: empty");
  return c;
}

// ---- serialisation helpers

template <typename T>
void put(std::vector<std::uint8_t>& out, const T& value) {
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof value);
}

class Reader {
 public:
  explicit Reader(const std::vector<std::uint8_t>& bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    T value;
    take(&value, sizeof value);
    return value;
  }
  void take(void* out, std::size_t size) {
    if (size > bytes_.size() - at_) throw std::invalid_argument("checkpoint tensors: message truncated");
    std::memcpy(out, bytes_.data() + at_, size);
    at_ += size;
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  const std::vector<std::uint8_t>& bytes_;
  std::size_t at_ = 0;
};

// ---- the parts of a file, shared by the single file, the shards and the manifest

void write_metadata(hid_t file, const Checkpoint& c, const std::string& context) {
  write_int_attribute(file, "format_version", c.format_version, context);
  write_int_attribute(file, "completed_steps", c.completed_steps, context);
  write_int_attribute(file, "global_batch_sequences", c.global_batch_sequences, context);
  write_int_attribute(file, "sampler_seed", static_cast<std::int64_t>(c.sampler.seed), context);
  write_int_attribute(file, "sampler_epoch", c.sampler.epoch, context);
  write_int_attribute(file, "sampler_position", c.sampler.position, context);
  write_string_attribute(file, "model_name", c.model.name, context);
  write_int_attribute(file, "model_layers", c.model.layers, context);
  write_int_attribute(file, "model_hidden", c.model.hidden, context);
  write_int_attribute(file, "model_heads", c.model.heads, context);
  write_int_attribute(file, "model_vocabulary", c.model.vocabulary, context);
  write_int_attribute(file, "model_sequence_length", c.model.sequence_length, context);
  if (!c.model.tied_head) write_string_attribute(file, "model_lm_head", "untied", context);
  write_string_attribute(file, "config", c.config_text, context);
  write_string_attribute(file, "plan", c.plan_text, context);
  if (!c.tokenizer_text.empty()) write_string_attribute(file, "tokenizer", c.tokenizer_text, context);
  if (c.weights_only) write_int_attribute(file, "weights_only", 1, context);
  write_string_attribute(file, "writer", "geotrain 0.1.0", context);
}

// /params (and /optimizer/m, /optimizer/v unless weights only), then /error_feedback.
void write_tensors(hid_t file, const Checkpoint& c, const std::string& context) {
  Handle params = detail::create_group(file, "params", context);
  Handle optimizer = c.weights_only ? Handle() : detail::create_group(file, "optimizer", context);
  Handle m = c.weights_only ? Handle() : detail::create_group(optimizer, "m", context);
  Handle v = c.weights_only ? Handle() : detail::create_group(optimizer, "v", context);
  for (const CheckpointTensor& t : c.tensors) {
    detail::check_tensor_size(t, !c.weights_only, "write_checkpoint_file");
    write_dataset(params, t.name, t.shape, t.values(), context + ": /params/" + t.name);
    if (c.weights_only) continue;
    write_dataset(m, t.name, t.shape, t.first_moments(), context + ": /optimizer/m/" + t.name);
    write_dataset(v, t.name, t.shape, t.second_moments(), context + ": /optimizer/v/" + t.name);
  }
  if (!c.weights_only) write_residuals(file, c, context);
}

Handle open_checkpoint_file(const std::string& path) {
  if (!fs::exists(path)) throw InputError(path + ": cannot open file (no such checkpoint)");
  if (H5Fis_hdf5(path.c_str()) <= 0) throw InputError(path + ": not an HDF5 file (truncated or not a checkpoint)");
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file < 0) throw InputError(path + ": cannot be opened as HDF5 (truncated or damaged)");
  return file;
}

std::int64_t read_format_version(hid_t file, const std::string& path) {
  const std::int64_t version = read_int_attribute(file, "format_version", path);
  if (version != kCheckpointFormatVersion) {
    throw InputError(path + ": attribute format_version: " + std::to_string(version) +
                     " is not supported (this geotrain reads version " + std::to_string(kCheckpointFormatVersion) + ")");
  }
  return version;
}

// The root attributes (write_metadata's) of a single file or a manifest.
Checkpoint read_metadata(hid_t file, const std::string& path) {
  Checkpoint c;
  c.format_version = static_cast<int>(read_format_version(file, path));
  c.completed_steps = read_int_attribute(file, "completed_steps", path);
  if (H5Aexists(file, "global_batch_sequences") > 0) {
    c.global_batch_sequences = read_int_attribute(file, "global_batch_sequences", path);
  }
  c.sampler.seed = static_cast<std::uint64_t>(read_int_attribute(file, "sampler_seed", path));
  c.sampler.epoch = read_int_attribute(file, "sampler_epoch", path);
  c.sampler.position = read_int_attribute(file, "sampler_position", path);
  if (c.completed_steps < 0 || c.global_batch_sequences < 0 || c.sampler.epoch < 0 || c.sampler.position < 0) {
    throw InputError(path + ": attribute completed_steps / global_batch_sequences / sampler_*: negative");
  }
  c.model.name = read_string_attribute(file, "model_name", path);
  c.model.layers = static_cast<int>(read_int_attribute(file, "model_layers", path));
  c.model.hidden = static_cast<int>(read_int_attribute(file, "model_hidden", path));
  c.model.heads = static_cast<int>(read_int_attribute(file, "model_heads", path));
  c.model.vocabulary = static_cast<int>(read_int_attribute(file, "model_vocabulary", path));
  c.model.sequence_length = static_cast<int>(read_int_attribute(file, "model_sequence_length", path));
  if (H5Aexists(file, "model_lm_head") > 0) {  // absent: tied (files before untied heads)
    const std::string head = read_string_attribute(file, "model_lm_head", path);
    if (head != "tied" && head != "untied") throw InputError(path + ": attribute model_lm_head: must be tied or untied");
    c.model.tied_head = head == "tied";
  }
  c.config_text = read_string_attribute(file, "config", path);
  c.plan_text = read_string_attribute(file, "plan", path);
  if (H5Aexists(file, "tokenizer") > 0) c.tokenizer_text = read_string_attribute(file, "tokenizer", path);
  if (H5Aexists(file, "weights_only") > 0) {
    const std::int64_t weights_only = read_int_attribute(file, "weights_only", path);
    if (weights_only != 0 && weights_only != 1) throw InputError(path + ": attribute weights_only: must be 0 or 1");
    c.weights_only = weights_only == 1;
  }
  return c;
}

// Every /params tensor with its two moments, appended to c.tensors.
void read_moment_tensors(hid_t file, const std::string& path, Checkpoint& c) {
  for (const char* group : {"params", "optimizer/m", "optimizer/v"}) {
    if (H5Lexists(file, "optimizer", H5P_DEFAULT) <= 0 && std::string(group) != "params") {
      throw InputError(path + ": /optimizer: missing");
    }
    if (H5Lexists(file, group, H5P_DEFAULT) <= 0) throw InputError(path + ": /" + group + ": missing");
  }
  Handle params(GT_H5_CHECK(H5Gopen2(file, "params", H5P_DEFAULT), path + ": /params", true), H5Gclose);
  Handle m(GT_H5_CHECK(H5Gopen2(file, "optimizer/m", H5P_DEFAULT), path + ": /optimizer/m", true), H5Gclose);
  Handle v(GT_H5_CHECK(H5Gopen2(file, "optimizer/v", H5P_DEFAULT), path + ": /optimizer/v", true), H5Gclose);
  for (const std::string& name : member_names(params, path + ": /params")) {
    CheckpointTensor t;
    t.name = name;
    t.value = read_dataset(params, name, path + ": /params/" + name, t.shape, {});
    std::vector<int> shape;
    t.first_moment = read_dataset(m, name, path + ": /optimizer/m/" + name, shape, t.shape);
    t.second_moment = read_dataset(v, name, path + ": /optimizer/v/" + name, shape, t.shape);
    c.tensors.push_back(std::move(t));
  }
}

// ---- the checkpoint directory

constexpr const char* kManifestName = "manifest.h5";

void make_folder(const std::string& folder, const std::string& what) {
  std::error_code error;
  fs::create_directories(folder, error);
  if (error) throw RunError(folder + ": cannot create " + what + ": " + error.message());
}

// `write` fills `path`.tmp, which is then flushed to disk and renamed to
// `path`: a reader never sees a partly written file under its final name.
void write_then_rename(const std::string& path, const std::function<void(const std::string&)>& write,
                       const TensorsWritten& tensors_written = {}) {
  const std::string temporary = path + ".tmp";
  write(temporary);
  if (tensors_written) tensors_written();  // the file is closed: HDF5 holds no pointer into the tensors
  fsync_path(temporary);
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) throw RunError(temporary + ": cannot rename to " + path + ": " + error.message());
}

// The step of a checkpoint entry of the directory (step_N.h5, or a step_N
// folder); -1 for anything else.
std::int64_t step_of(const std::string& entry) {
  static const std::regex pattern("step_([0-9]{8})(\\.h5)?");
  std::smatch match;
  return std::regex_match(entry, match, pattern) ? std::stoll(match[1].str()) : -1;
}

// Deletes all but the newest `keep` complete checkpoints (a file, or a folder
// with its manifest), and the incomplete folders older than `current`
// (left by a run killed mid-write; newer ones may be being written).
void prune(const std::string& dir, int keep, const std::string& current) {
  std::vector<std::pair<std::int64_t, std::string>> complete;
  std::vector<std::string> doomed;  // removed after the listing, not while it runs
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const std::int64_t step = step_of(name);
    if (step < 0 || name == current) continue;
    if (!entry.is_directory() || fs::exists(entry.path() / kManifestName)) {
      complete.emplace_back(step, name);
    } else if (step < step_of(current)) {
      doomed.push_back(name);
    }
  }
  std::sort(complete.begin(), complete.end());
  // `current` is the newest and counts as one of the `keep`.
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < complete.size() + 1; ++i) {
    doomed.push_back(complete[i].second);
  }
  std::error_code error;
  for (const std::string& name : doomed) fs::remove_all(fs::path(dir) / name, error);
}

// `latest` names `name` (replaced atomically), then older ones are pruned.
void publish_latest(const std::string& dir, const std::string& name, int keep) {
  const std::string latest = (fs::path(dir) / "latest").string();
  {
    std::ofstream out(latest + ".tmp", std::ios::trunc);
    out << name << "\n";
    out.close();
    if (!out) throw RunError(latest + ".tmp: cannot write");
  }
  fsync_path(latest + ".tmp");
  std::error_code error;
  fs::rename(latest + ".tmp", latest, error);
  if (error) throw RunError(latest + ": cannot replace: " + error.message());
  fsync_path(dir);
  prune(dir, keep, name);  // only after `latest` moved on
}

// A shard's tensors and residuals into `c`, after checking it belongs to it.
void read_shard(const std::string& path, const std::string& manifest, Checkpoint& c) {
  if (!fs::exists(path)) {
    throw InputError(path + ": missing (a shard that " + manifest + " lists; the checkpoint is incomplete)");
  }
  const Handle file = open_checkpoint_file(path);
  read_format_version(file, path);
  if (H5Aexists(file, "shard") <= 0) throw InputError(path + ": attribute shard: missing (not a checkpoint shard)");
  if (read_int_attribute(file, "completed_steps", path) != c.completed_steps) {
    throw InputError(path + ": attribute completed_steps: differs from " + manifest + "'s " +
                     std::to_string(c.completed_steps) + " (a shard of another checkpoint)");
  }
  read_moment_tensors(file, path, c);
  read_residuals(file, path, c);
}

std::string manifest_of(const fs::path& folder) {
  const std::string manifest = (folder / kManifestName).string();
  if (!fs::exists(manifest)) {
    throw InputError(manifest + ": missing (an incomplete sharded checkpoint: its manifest is written last)");
  }
  return manifest;
}

std::vector<std::string> shards_listed(hid_t file, const std::string& manifest) {
  std::vector<std::string> listed;
  std::istringstream shards(read_string_attribute(file, "shards", manifest));
  for (std::string shard; std::getline(shards, shard);) {
    if (shard.empty() || shard.find('/') != std::string::npos) {
      throw InputError(manifest + ": attribute shards: '" + shard + "' is not a file name");
    }
    listed.push_back(shard);
  }
  return listed;
}

// A step folder: the manifest's attributes, then every shard it lists.
Checkpoint read_sharded(const fs::path& folder) {
  const auto hdf5_in_use = use_library();
  const std::string manifest = manifest_of(folder);
  const Handle file = open_checkpoint_file(manifest);
  Checkpoint c = read_metadata(file, manifest);
  if (c.weights_only) {  // its shards hold the moments: geotrain writes weights-only checkpoints as one file
    throw InputError(manifest + ": attribute weights_only: 1 in a sharded checkpoint (its shards hold the optimizer's "
                     "moments; weights-only checkpoints are single files)");
  }
  for (const std::string& shard : shards_listed(file, manifest)) read_shard((folder / shard).string(), manifest, c);
  std::vector<std::string> names;
  for (const CheckpointTensor& t : c.tensors) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  if (const auto twice = std::adjacent_find(names.begin(), names.end()); twice != names.end()) {
    throw InputError(manifest + ": /params/" + *twice + ": held by two shards");
  }
  if (c.tensors.empty()) throw InputError(manifest + ": attribute shards: no shard holds a parameter");
  return c;
}

}  // namespace

std::vector<std::string> listed_shards(const std::string& folder) {
  const auto hdf5_in_use = use_library();
  const std::string manifest = manifest_of(folder);
  return shards_listed(open_checkpoint_file(manifest), manifest);
}

const CheckpointTensor* Checkpoint::find(const std::string& name) const {
  for (const CheckpointTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void write_checkpoint_file(const std::string& path, const Checkpoint& c) {
  const auto hdf5_in_use = use_library();
  Handle file(GT_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), path, false), H5Fclose);
  write_metadata(file, c, path);
  write_tensors(file, c, path);
  GT_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL), path, false);
}

Checkpoint read_checkpoint_file(const std::string& path) {
  const auto hdf5_in_use = use_library();
  const Handle file = open_checkpoint_file(path);
  if (H5Aexists(file, "shard") > 0) {
    throw InputError(path + ": attribute shard: one shard of a sharded checkpoint (open its folder, " +
                     fs::path(path).parent_path().string() + ")");
  }
  Checkpoint c = read_metadata(file, path);
  if (c.weights_only) return read_weights(file, path, std::move(c));
  read_moment_tensors(file, path, c);
  if (c.tensors.empty()) throw InputError(path + ": /params: empty");
  read_residuals(file, path, c);
  return c;
}

std::vector<std::uint8_t> serialize_tensors(const std::vector<CheckpointTensor>& tensors) {
  std::vector<std::uint8_t> out;
  put(out, static_cast<std::uint32_t>(tensors.size()));
  for (const CheckpointTensor& t : tensors) {
    put(out, static_cast<std::uint32_t>(t.name.size()));
    out.insert(out.end(), t.name.begin(), t.name.end());
    put(out, static_cast<std::uint32_t>(t.shape.size()));
    for (int d : t.shape) put(out, static_cast<std::int32_t>(d));
    const bool moments = !t.first_moments().empty();
    if (moments != !t.second_moments().empty()) throw std::invalid_argument("serialize_tensors: " + t.name + ": one moment");
    put(out, static_cast<std::uint8_t>(moments ? 1 : 0));
    for (const std::span<const float> data : {t.values(), t.first_moments(), t.second_moments()}) {
      const auto* bytes = reinterpret_cast<const std::uint8_t*>(data.data());
      out.insert(out.end(), bytes, bytes + data.size() * sizeof(float));
    }
  }
  return out;
}

std::vector<CheckpointTensor> deserialize_tensors(const std::vector<std::uint8_t>& bytes) {
  Reader in(bytes);
  const std::uint32_t count = in.get<std::uint32_t>();
  // The smallest tensor (1-byte name, rank 1, no moments, one float) takes 18
  // bytes: a count the message cannot hold is refused before allocating.
  constexpr std::size_t kSmallestTensorBytes = 4 + 1 + 4 + 4 + 1 + sizeof(float);
  if (count > 1000000 || count > (bytes.size() - sizeof count) / kSmallestTensorBytes) {
    throw std::invalid_argument("checkpoint tensors: implausible tensor count");
  }
  std::vector<CheckpointTensor> tensors(count);
  for (CheckpointTensor& t : tensors) {
    const std::uint32_t name_length = in.get<std::uint32_t>();
    if (name_length == 0 || name_length > 4096) throw std::invalid_argument("checkpoint tensors: bad name length");
    t.name.resize(name_length);
    in.take(t.name.data(), name_length);
    const std::uint32_t rank = in.get<std::uint32_t>();
    if (rank < 1 || rank > 4) throw std::invalid_argument("checkpoint tensors: bad rank");
    std::size_t n = 1;
    for (std::uint32_t i = 0; i < rank; ++i) {
      const std::int32_t d = in.get<std::int32_t>();
      if (d < 1) throw std::invalid_argument("checkpoint tensors: bad dimension");
      t.shape.push_back(d);
      // The floats must fit in the message; checked factor by factor, so that
      // the product cannot wrap around (to 0 floats for a 2^64-element shape).
      if (n > bytes.size() / static_cast<std::size_t>(d)) {
        throw std::invalid_argument("checkpoint tensors: message truncated");
      }
      n *= static_cast<std::size_t>(d);
    }
    const std::uint8_t moments = in.get<std::uint8_t>();
    if (moments > 1) throw std::invalid_argument("checkpoint tensors: bad moments flag");
    for (auto* data : {&t.value, &t.first_moment, &t.second_moment}) {
      if (data != &t.value && moments == 0) continue;
      data->resize(n);
      in.take(data->data(), n * sizeof(float));
    }
  }
  if (!in.done()) throw std::invalid_argument("checkpoint tensors: trailing bytes");
  return tensors;
}

std::string step_name(std::int64_t completed_steps, bool sharded) {
  char name[64];
  std::snprintf(name, sizeof name, "step_%08lld%s", static_cast<long long>(completed_steps), sharded ? "" : ".h5");
  return name;
}

std::string shard_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d.h5", rank);
  return name;
}

std::string save_checkpoint(const std::string& dir, const Checkpoint& checkpoint, int keep,
                            const TensorsWritten& tensors_written) {
  make_folder(dir, "the checkpoint directory");
  const std::string name = step_name(checkpoint.completed_steps, false);
  const std::string final_path = (fs::path(dir) / name).string();
  write_then_rename(
      final_path, [&](const std::string& temporary) { write_checkpoint_file(temporary, checkpoint); }, tensors_written);
  fsync_path(dir);
  publish_latest(dir, name, keep);
  return final_path;
}

std::string write_checkpoint_shard(const std::string& dir, const Checkpoint& part, int rank,
                                   const TensorsWritten& tensors_written) {
  const fs::path folder = fs::path(dir) / step_name(part.completed_steps, true);
  make_folder(folder.string(), "the checkpoint's folder");
  const std::string path = (folder / shard_name(rank)).string();
  write_then_rename(path, [&](const std::string& temporary) {
    const auto hdf5_in_use = use_library();
    Handle file(GT_H5_CHECK(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), temporary, false),
                H5Fclose);
    detail::write_shard_attributes(file, part, temporary);
    write_tensors(file, part, temporary);
    GT_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL), temporary, false);
  }, tensors_written);
  fsync_path(folder.string());
  return path;
}

std::string site_shard_name(int site_index, const std::string& site) {
  std::string safe = site.empty() ? "unnamed" : site;
  for (char& c : safe) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  }
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "site_%02d_", site_index);
  return prefix + safe + ".h5";
}

void publish_checkpoint(const std::string& dir, const std::string& name, int keep) {
  fsync_path(dir);
  publish_latest(dir, name, keep);
}

std::string publish_sharded_checkpoint(const std::string& dir, const Checkpoint& metadata,
                                       const std::vector<std::string>& shards, int keep,
                                       const std::vector<std::string>& present) {
  const std::string name = step_name(metadata.completed_steps, true);
  const fs::path folder = fs::path(dir) / name;
  for (const std::string& shard : present) {
    if (!fs::exists(folder / shard)) {
      throw RunError((folder / shard).string() + ": missing where the manifest is written (checkpoint.form = sharded "
                     "needs checkpoint.dir on a file system that every rank shares; else per_site or single)");
    }
  }
  std::string listed;
  for (const std::string& shard : shards) listed += (listed.empty() ? "" : "\n") + shard;
  write_then_rename((folder / kManifestName).string(), [&](const std::string& temporary) {
    const auto hdf5_in_use = use_library();
    Handle file(GT_H5_CHECK(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), temporary, false),
                H5Fclose);
    write_metadata(file, metadata, temporary);
    write_string_attribute(file, "shards", listed, temporary);
    GT_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL), temporary, false);
  });
  fsync_path(folder.string());
  fsync_path(dir);
  publish_latest(dir, name, keep);
  return folder.string();
}

Checkpoint read_checkpoint(const std::string& path) {
  const fs::path given(path);
  if (fs::is_directory(given)) return read_sharded(given);
  if (given.filename() == kManifestName) return read_sharded(given.parent_path());
  return read_checkpoint_file(path);
}

std::string resolve_resume(const std::string& dir, const std::string& resume) {
  if (resume != "auto") return resume;
  const fs::path latest = fs::path(dir) / "latest";
  if (!fs::exists(latest)) return "";
  std::ifstream in(latest);
  std::string name;
  std::getline(in, name);
  const fs::path target = fs::path(dir) / name;
  if (name.empty() || name.find('/') != std::string::npos || !fs::exists(target) ||
      (fs::is_directory(target) && !fs::exists(target / kManifestName))) {
    throw InputError(latest.string() + ": names '" + name + "', which is not a checkpoint in " + dir);
  }
  return target.string();
}

#ifndef H5_HAVE_PARALLEL
// The serial library: the collective writer (parallel_checkpoint.cpp) is not built.
bool parallel_hdf5_built() { return false; }

void write_checkpoint_collectively(int, const std::string& path, const Checkpoint&, CollectiveFile,
                                   const TensorsWritten&) {
  throw RunError(path + ": this geotrain was built with the serial HDF5 library (no MPI-IO); install "
                 "libhdf5-openmpi-dev and rebuild, or use checkpoint.form = sharded");
}
#endif

namespace detail {

void write_checkpoint_attributes(hid_t file, const Checkpoint& c, const std::string& context) {
  write_metadata(file, c, context);
}

void write_shard_attributes(hid_t file, const Checkpoint& c, const std::string& context) {
  write_int_attribute(file, "format_version", c.format_version, context);
  write_int_attribute(file, "completed_steps", c.completed_steps, context);
  write_int_attribute(file, "shard", 1, context);
}

void write_then_rename(const std::string& path, const std::function<void(const std::string&)>& write,
                       const TensorsWritten& tensors_written) {
  io::write_then_rename(path, write, tensors_written);
}

void make_folder(const std::string& folder, const std::string& what) { io::make_folder(folder, what); }

Handle create_group(hid_t parent, const char* name, const std::string& context) {
  return Handle(GT_H5_CHECK(H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), context, false), H5Gclose);
}

void check_tensor_size(const CheckpointTensor& t, bool with_moments, const char* writer) {
  const std::size_t n = element_count(t.shape);
  if (t.values().size() != n || (with_moments && (t.first_moments().size() != n || t.second_moments().size() != n))) {
    throw std::invalid_argument(std::string(writer) + ": tensor " + t.name + " has the wrong size");
  }
}

}  // namespace detail

void write_file_durably(const std::string& path, std::span<const std::uint8_t> bytes) {
  io::write_then_rename(path, [&](const std::string& temporary) {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) throw RunError(temporary + ": cannot write");
  });
}

}  // namespace geotrain::io
