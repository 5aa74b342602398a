// The checkpoint's HDF5 file format (docs: include/geotrain/io/checkpoint.hpp):
// the root's attributes, /params with /optimizer/m and /optimizer/v, and
// /error_feedback, written and read back in one file. The folders of steps,
// shards and manifests that hold such files are checkpoint_directory.cpp's.
#include "geotrain/io/checkpoint.hpp"

#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <stdexcept>

#include "geotrain/common/errors.hpp"
#include "geotrain/common/model_shape.hpp"
#include "geotrain/io/crc32.hpp"
#include "checkpoint_format.hpp"
#include "hdf5_support.hpp"

namespace geotrain::io {
namespace {

namespace fs = std::filesystem;
using namespace hdf5;

// Far above any tensor of the models geotrain trains (GPT3-XL's largest
// holds 1e8 floats); an 8 GiB tensor is a damaged or foreign file.
constexpr std::uint64_t kMaxTensorElements = std::uint64_t{1} << 31;

// A tensor's dataset: contiguous, its checksum (a crc32 attribute) written by
// write_tensors once the helper thread has computed it.
void write_dataset(hid_t group, const std::string& name, const std::vector<int>& shape, std::span<const float> data,
                   const std::string& context) {
  const std::vector<hsize_t> dims(shape.begin(), shape.end());
  write_array(group, name, dims, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, data.data(), "", context);
}

// What guards a tensor's bytes: a crc32 attribute (what every writer stores
// since the checksums' cost was cut) or HDF5's Fletcher32 filter (how the
// first writers of format version 2 guarded the files one process wrote).
// Files of format version 1, written before checksums, have none: read as they are.
enum class Checksum { fletcher32, crc32, none };

bool written_before_checksums(hid_t set, const std::string& field) {
  Handle file(GT_H5_CHECK(H5Iget_file_id(set), field, true), H5Fclose);
  return H5Aexists(file, "format_version") > 0 && detail::read_int_attribute(file, "format_version", field) == 1;
}

Checksum checksum_of(hid_t set, const std::string& field) {
  Handle properties(GT_H5_CHECK(H5Dget_create_plist(set), field, true), H5Pclose);
  const int filters = GT_H5_CHECK(H5Pget_nfilters(properties), field, true);
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0;
    std::size_t values = 0;
    if (H5Pget_filter2(properties, static_cast<unsigned>(i), &flags, &values, nullptr, 0, nullptr, nullptr) ==
        H5Z_FILTER_FLETCHER32) {
      return Checksum::fletcher32;
    }
  }
  if (H5Aexists(set, "crc32") > 0) return Checksum::crc32;
  if (written_before_checksums(set, field)) return Checksum::none;
  throw InputError(field + ": no checksum (neither HDF5's Fletcher32 filter nor a crc32 attribute): not written by "
                   "this geotrain; write it again with geotrain (convert --from-hf, or train)");
}

// Reads the floats of `set` and verifies their checksum.
void read_verified(hid_t set, const std::string& field, std::vector<float>& data) {
  const Checksum checksum = checksum_of(set, field);
  if (H5Dread(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) < 0) {
    const std::string cause = last_error_text();
    throw InputError(field + ": damaged: " +
                     (checksum == Checksum::fletcher32 ? "its bytes fail their Fletcher32 checksum (" + cause + ")"
                                                       : "cannot be read (" + cause + ")") +
                     "; use another checkpoint or an intact copy of this one");
  }
  if (checksum != Checksum::crc32) return;
  const std::int64_t stored = detail::read_int_attribute(set, "crc32", field);
  if (stored != detail::crc32_of(data)) {
    throw InputError(field + ": damaged: its bytes fail their checksum (attribute crc32 " + std::to_string(stored) +
                     ", bytes " + std::to_string(detail::crc32_of(data)) +
                     "); use another checkpoint or an intact copy of this one");
  }
}

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
      throw InputError(field + ": shape " + dims_text(shape) + " has more than 2^31 elements (damaged file?)");
    }
    elements *= d;
  }
  if (!expected.empty() && shape != expected) {
    throw InputError(field + ": shape " + dims_text(shape) + " differs from the parameter's " + dims_text(expected));
  }
  std::vector<float> data(element_count(shape));
  read_verified(set, field, data);
  return data;
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

}  // namespace

namespace detail {

std::int64_t crc32_of(std::span<const float> data) {
  return static_cast<std::int64_t>(crc32_of_bytes(data.data(), data.size() * sizeof(float)));
}

DigestsInBackground::DigestsInBackground(std::vector<std::span<const float>> spans)
    : digests_(std::async(std::launch::async, [spans = std::move(spans)] {
        std::vector<std::int64_t> sums;
        sums.reserve(spans.size());
        for (std::span<const float> s : spans) sums.push_back(crc32_of(s));
        return sums;
      })) {}

std::vector<std::int64_t> DigestsInBackground::get() { return digests_.get(); }

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

Handle open_checkpoint_file(const std::string& path) {
  if (!fs::exists(path)) throw InputError(path + ": cannot open file (no such checkpoint)");
  if (H5Fis_hdf5(path.c_str()) <= 0) throw InputError(path + ": not an HDF5 file (truncated or not a checkpoint)");
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file < 0) throw InputError(path + ": cannot be opened as HDF5 (truncated or damaged)");
  return file;
}

std::int64_t read_format_version(hid_t file, const std::string& path) {
  const std::int64_t version = read_int_attribute(file, "format_version", path);
  // Version 1 (before checksums) is still read, its tensors unverified.
  if (version != kCheckpointFormatVersion && version != 1) {
    throw InputError(path + ": attribute format_version: " + std::to_string(version) +
                     " is not supported (this geotrain reads versions 1 and " + std::to_string(kCheckpointFormatVersion) +
                     "; a newer geotrain wrote it?)");
  }
  return version;
}

Checkpoint read_checkpoint_attributes(hid_t file, const std::string& path) {
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
  if (H5Aexists(file, "layout") > 0) c.layout_text = read_string_attribute(file, "layout", path);
  c.plan_text = read_string_attribute(file, "plan", path);
  if (H5Aexists(file, "tokenizer") > 0) c.tokenizer_text = read_string_attribute(file, "tokenizer", path);
  if (H5Aexists(file, "weights_only") > 0) {
    const std::int64_t weights_only = read_int_attribute(file, "weights_only", path);
    if (weights_only != 0 && weights_only != 1) throw InputError(path + ": attribute weights_only: must be 0 or 1");
    c.weights_only = weights_only == 1;
  }
  return c;
}

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

void write_checkpoint_attributes(hid_t file, const Checkpoint& c, const std::string& context) {
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
  if (!c.layout_text.empty()) write_string_attribute(file, "layout", c.layout_text, context);
  write_string_attribute(file, "plan", c.plan_text, context);
  if (!c.tokenizer_text.empty()) write_string_attribute(file, "tokenizer", c.tokenizer_text, context);
  if (c.weights_only) write_int_attribute(file, "weights_only", 1, context);
  write_string_attribute(file, "writer", "geotrain 0.1.0", context);
}

void write_shard_attributes(hid_t file, const Checkpoint& c, const std::string& context) {
  write_int_attribute(file, "format_version", c.format_version, context);
  write_int_attribute(file, "completed_steps", c.completed_steps, context);
  write_int_attribute(file, "shard", 1, context);
}

void write_tensors(hid_t file, const Checkpoint& c, const std::string& context) {
  struct Tensor {
    hid_t group;
    std::string name, where;
    std::vector<int> shape;
    std::span<const float> data;
  };
  std::vector<Tensor> tensors;
  Handle params = create_group(file, "params", context);
  Handle optimizer = c.weights_only ? Handle() : create_group(file, "optimizer", context);
  Handle m = c.weights_only ? Handle() : create_group(optimizer, "m", context);
  Handle v = c.weights_only ? Handle() : create_group(optimizer, "v", context);
  for (const CheckpointTensor& t : c.tensors) {
    check_tensor_size(t, !c.weights_only, "write_checkpoint_file");
    tensors.push_back({params, t.name, "/params/", t.shape, t.values()});
    if (c.weights_only) continue;
    tensors.push_back({m, t.name, "/optimizer/m/", t.shape, t.first_moments()});
    tensors.push_back({v, t.name, "/optimizer/v/", t.shape, t.second_moments()});
  }
  const bool residuals = !c.weights_only && !c.residuals.empty();
  Handle feedback = residuals ? create_group(file, "error_feedback", context) : Handle();
  if (residuals) {
    write_string_attribute(feedback, "layout", c.residual_layout, context + ": /error_feedback");
    for (const CheckpointTensor& t : c.residuals) {
      tensors.push_back({feedback, t.name, "/error_feedback/", {static_cast<int>(t.value.size())}, t.value});
    }
  }
  std::vector<std::span<const float>> spans;
  for (const Tensor& t : tensors) spans.push_back(t.data);
  DigestsInBackground digests(std::move(spans));
  for (const Tensor& t : tensors) write_dataset(t.group, t.name, t.shape, t.data, context + ": " + t.where + t.name);
  const std::vector<std::int64_t> sums = digests.get();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string where = context + ": " + tensors[i].where + tensors[i].name;
    Handle set(GT_H5_CHECK(H5Dopen2(tensors[i].group, tensors[i].name.c_str(), H5P_DEFAULT), where, false), H5Dclose);
    write_int_attribute(set, "crc32", sums[i], where);
  }
}

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

const CheckpointTensor* Checkpoint::find(const std::string& name) const {
  for (const CheckpointTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void write_checkpoint_file(const std::string& path, const Checkpoint& c) {
  const auto hdf5_in_use = use_library();
  Handle file(GT_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), path, false), H5Fclose);
  detail::write_checkpoint_attributes(file, c, path);
  detail::write_tensors(file, c, path);
  GT_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL), path, false);
}

Checkpoint read_checkpoint_file(const std::string& path) {
  const auto hdf5_in_use = use_library();
  const Handle file = detail::open_checkpoint_file(path);
  if (H5Aexists(file, "shard") > 0) {
    throw InputError(path + ": attribute shard: one shard of a sharded checkpoint (open its folder, " +
                     fs::path(path).parent_path().string() + ")");
  }
  Checkpoint c = detail::read_checkpoint_attributes(file, path);
  if (c.weights_only) return read_weights(file, path, std::move(c));
  detail::read_moment_tensors(file, path, c);
  if (c.tensors.empty()) throw InputError(path + ": /params: empty");
  detail::read_residuals(file, path, c);
  return c;
}

}  // namespace geotrain::io
