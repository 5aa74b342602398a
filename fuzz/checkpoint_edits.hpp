// What the checkpoint harnesses share (checkpoint.cpp: one file;
// checkpoint_folder.cpp: a sharded folder): a small valid checkpoint, the
// edits through the HDF5 API that damage a copy of it (see checkpoint.cpp),
// and the invariants of a checkpoint a reader accepted.
#pragma once
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_input.hpp"
#include "fuzz_support.hpp"
#include "geotrain/io/checkpoint.hpp"
#include "io/hdf5_support.hpp"  // geotrain's own HDF5 handle (a private header of geotrain_io)

namespace geotrain::fuzz {

using io::Checkpoint;
using io::CheckpointTensor;

// Handles close on scope exit: the file must have no object left open when
// it closes, or the reader would share this still-open file.
using H5Handle = io::hdf5::Handle;

inline CheckpointTensor tensor(const std::string& name, std::vector<int> shape) {
  CheckpointTensor t;
  t.name = name;
  t.shape = std::move(shape);
  std::size_t n = 1;
  for (int d : t.shape) n *= static_cast<std::size_t>(d);
  for (std::size_t i = 0; i < n; ++i) {
    t.value.push_back(0.25f * static_cast<float>(i) - 1.0f);
    t.first_moment.push_back(1e-3f * static_cast<float>(i));
    t.second_moment.push_back(1e-6f * static_cast<float>(i + 1));
  }
  return t;
}

inline const char* const kTensorNames[] = {"wte", "h.0.attn.qkv.weight", "lnf.bias", "extra"};

inline Checkpoint base_checkpoint() {
  Checkpoint c;
  c.completed_steps = 12;
  c.sampler = {7, 1, 3};
  c.model.name = "fuzz";
  c.model.layers = 1;
  c.model.hidden = 4;
  c.model.heads = 2;
  c.model.vocabulary = 8;
  c.model.sequence_length = 4;
  c.config_text = "train.steps = 12\n";
  c.plan_text = "single rank: 1 stage x 1 replica";
  c.tensors = {tensor(kTensorNames[0], {8, 4}), tensor(kTensorNames[1], {4, 3, 4}), tensor(kTensorNames[2], {4})};
  return c;
}

// ---- edits through the HDF5 API (each may fail; a failed edit is no edit)

inline const char* const kAttributes[] = {"format_version",   "completed_steps", "global_batch_sequences", "sampler_seed",
                                   "sampler_epoch",    "sampler_position", "model_name",            "model_layers",
                                   "model_hidden",     "model_heads",     "model_vocabulary",       "model_sequence_length",
                                   "config",           "plan",            "writer",                 "weights_only"};
inline const char* const kTensorGroups[] = {"params", "optimizer/m", "optimizer/v"};
inline const char* const kGroupPaths[] = {"params", "optimizer", "optimizer/m", "optimizer/v"};
inline const char* const kLinkTargets[] = {"/params/wte", "/params/lnf.bias", "/optimizer/m/wte", "/optimizer", "/params",
                                    "/nowhere"};

inline void write_attribute(hid_t file, const char* name, hid_t type, hid_t space, hid_t memory_type, const void* data) {
  H5Handle attribute(H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (attribute.ok() && data != nullptr) H5Awrite(attribute, memory_type, data);
}

inline hid_t space_of(int elements) {  // 0: scalar
  if (elements == 0) return H5Screate(H5S_SCALAR);
  const hsize_t dims[1] = {static_cast<hsize_t>(elements)};
  return H5Screate_simple(1, dims, nullptr);
}

inline void rewrite_attribute(hid_t file, FuzzInput& in) {
  const char* name = in.pick(kAttributes);
  H5Adelete(file, name);
  // Scalars mostly; arrays and the null dataspace are what a foreign writer might leave.
  const int elements = in.flag() ? 0 : in.in_range(1, 8);
  switch (in.in_range(0, 4)) {
    case 0: {  // integer, of some width and byte order
      const hid_t types[] = {H5T_STD_I64LE, H5T_STD_I32LE, H5T_STD_U64LE, H5T_STD_U8LE, H5T_STD_I64BE};
      const std::int64_t interesting[] = {0, 1, -1, 2, INT64_MIN, INT64_MAX, INT32_MAX, INT32_MIN, 1LL << 32};
      std::vector<std::int64_t> values(std::max(elements, 1));
      for (auto& v : values) v = in.flag() ? in.pick(interesting) : in.raw<std::int64_t>();
      H5Handle space(space_of(elements), H5Sclose);
      write_attribute(file, name, in.pick(types), space, H5T_NATIVE_INT64, values.data());
      break;
    }
    case 1: {  // floating point
      std::vector<double> values(std::max(elements, 1));
      for (auto& v : values) v = in.raw<double>();
      H5Handle space(space_of(elements), H5Sclose);
      write_attribute(file, name, H5T_IEEE_F64LE, space, H5T_NATIVE_DOUBLE, values.data());
      break;
    }
    case 2: {  // fixed-length string of garbage, NUL-terminated or not
      const std::size_t length = in.in_range<std::size_t>(1, 48);
      H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(type, length);
      if (in.flag()) H5Tset_strpad(type, H5T_STR_NULLPAD);
      std::vector<char> text(length * std::max(elements, 1));
      for (char& ch : text) ch = static_cast<char>(in.byte());
      H5Handle space(space_of(elements), H5Sclose);
      write_attribute(file, name, type, space, type, text.data());
      break;
    }
    case 3: {  // variable-length string, ASCII or UTF-8
      std::vector<std::string> texts(std::max(elements, 1));
      std::vector<const char*> pointers;
      for (auto& t : texts) {
        t = in.text(40);
        pointers.push_back(t.c_str());
      }
      H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(type, H5T_VARIABLE);
      H5Tset_cset(type, in.flag() ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
      H5Handle space(space_of(elements), H5Sclose);
      write_attribute(file, name, type, space, type, pointers.data());
      break;
    }
    default: {  // an attribute with no value at all
      H5Handle space(H5Screate(H5S_NULL), H5Sclose);
      write_attribute(file, name, H5T_STD_I64LE, space, H5T_NATIVE_INT64, nullptr);
      break;
    }
  }
}

// Dimensions for a replacement dataset: small and real, or far past any
// tensor (a damaged header): whose products overflow or need terabytes,
// so that a reader that allocated before checking would be caught.
inline std::vector<hsize_t> dataset_dims(FuzzInput& in) {
  const bool huge = in.in_range(0, 7) == 0;
  const int rank = huge ? in.in_range(2, 4) : in.in_range(0, 5);
  const hsize_t huge_dims[] = {1ull << 16, 1ull << 30, (1ull << 30) + 1, 1ull << 31, 1ull << 33};
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  for (hsize_t& d : dims) d = huge ? in.pick(huge_dims) : in.in_range<hsize_t>(1, 6);
  return dims;
}

inline void create_dataset(hid_t file, const std::string& path, FuzzInput& in) {
  const hid_t types[] = {H5T_IEEE_F32LE, H5T_IEEE_F32LE, H5T_IEEE_F64LE, H5T_IEEE_F32BE, H5T_STD_I32LE, H5T_STD_U8LE};
  const hid_t type = in.pick(types);
  const std::vector<hsize_t> dims = dataset_dims(in);
  hsize_t elements = 1;
  for (hsize_t d : dims) elements = d != 0 && elements > UINT64_MAX / d ? UINT64_MAX : elements * d;
  H5Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                 H5Sclose);
  H5Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const bool stored = elements <= 4096;
  if (!stored) {  // chunks never written: a huge shape costs nothing in the file
    const std::vector<hsize_t> chunk(dims.size(), 1);
    H5Pset_chunk(properties, static_cast<int>(chunk.size()), chunk.data());
  }
  H5Handle set(H5Dcreate2(file, path.c_str(), type, space, H5P_DEFAULT, properties, H5P_DEFAULT), H5Dclose);
  if (!set.ok() || !stored) return;
  std::vector<float> values(elements);
  for (float& v : values) v = in.flag() ? in.raw<float>() : 0.5f;
  H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
}

inline std::string tensor_path(FuzzInput& in) {
  std::string name = in.pick(kTensorNames);
  if (in.in_range(0, 7) == 0) {  // a name of the fuzzer's own
    name = in.text(12);
    if (name.empty() || name == "." || name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
      name = "odd";
    }
  }
  return std::string(in.pick(kTensorGroups)) + "/" + name;
}

inline void replace_link(hid_t file, const std::string& path, FuzzInput& in) {
  H5Ldelete(file, path.c_str(), H5P_DEFAULT);
  switch (in.in_range(0, 4)) {
    case 0: create_dataset(file, path, in); break;
    case 1: {
      const H5Handle group(H5Gcreate2(file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      break;
    }
    case 2: H5Lcreate_soft(in.pick(kLinkTargets), file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT); break;
    case 3: H5Lcreate_hard(file, in.pick(kLinkTargets), file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT); break;
    default: break;  // deleted
  }
}

inline void edit(hid_t file, FuzzInput& in) {
  switch (in.in_range(0, 3)) {
    case 0: rewrite_attribute(file, in); break;
    case 1: H5Adelete(file, in.pick(kAttributes)); break;
    case 2: replace_link(file, tensor_path(in), in); break;
    default: replace_link(file, in.pick(kGroupPaths), in); break;
  }
}

struct Region {
  haddr_t offset;
  hsize_t size;
};

// Where a dataset's floats lie in the file: its one block (contiguous) or
// each of its chunks (files of format version 2 that carry Fletcher32 chunks).
inline void add_regions(hid_t set, std::vector<Region>& regions) {
  const haddr_t offset = H5Dget_offset(set);
  const hsize_t size = H5Dget_storage_size(set);
  if (offset != HADDR_UNDEF && size > 0) {
    regions.push_back({offset, size});
    return;
  }
  H5Handle space(H5Dget_space(set), H5Sclose);
  hsize_t chunks = 0;
  if (!space.ok() || H5Dget_num_chunks(set, space, &chunks) < 0) return;
  for (hsize_t i = 0; i < chunks; ++i) {
    unsigned mask = 0;
    haddr_t at = HADDR_UNDEF;
    hsize_t bytes = 0;
    if (H5Dget_chunk_info(set, space, i, nullptr, &mask, &at, &bytes) >= 0 && at != HADDR_UNDEF && bytes > 0) {
      regions.push_back({at, bytes});
    }
  }
}

// Where the tensors' floats lie in the file.
inline std::vector<Region> raw_data_regions(hid_t file) {
  std::vector<Region> regions;
  for (const char* group : kTensorGroups) {
    for (const char* name : kTensorNames) {
      const std::string path = std::string(group) + "/" + name;
      if (H5Lexists(file, group, H5P_DEFAULT) <= 0 || H5Lexists(file, path.c_str(), H5P_DEFAULT) <= 0) continue;
      H5Handle set(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);  // fails on a group or a dangling link
      if (set.ok()) add_regions(set, regions);
    }
  }
  return regions;
}

// Applies the input's edits to the checkpoint at `path`. `intact`: the file
// is the valid base (it must open); else an earlier edit may have broken
// it beyond opening, and then it is left as it is.
inline void damage(const std::string& path, FuzzInput& in, bool intact = true) {
  std::vector<Region> regions;
  {
    H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    if (!intact && !file.ok()) return;
    FUZZ_CHECK(file.ok(), "the base checkpoint does not open");
    const int edits = in.in_range(0, 6);
    for (int i = 0; i < edits; ++i) edit(file, in);
    regions = raw_data_regions(file);
    FUZZ_CHECK(H5Fget_obj_count(file, H5F_OBJ_ALL) == 1, "the harness left an HDF5 object open");
  }
  const int fd = ::open(path.c_str(), O_RDWR);
  FUZZ_CHECK(fd >= 0, path);
  const int flips = regions.empty() ? 0 : in.in_range(0, 3);
  for (int i = 0; i < flips; ++i) {
    const Region& region = regions[in.in_range<std::size_t>(0, regions.size() - 1)];
    const off_t at = static_cast<off_t>(region.offset + in.in_range<hsize_t>(0, region.size - 1));
    std::uint8_t byte = 0;
    if (::pread(fd, &byte, 1, at) == 1) {
      byte ^= in.byte() | 1;
      FUZZ_CHECK(::pwrite(fd, &byte, 1, at) == 1, "flip");
    }
  }
  if (in.flag()) {
    const off_t size = ::lseek(fd, 0, SEEK_END);
    if (size > 0) FUZZ_CHECK(::ftruncate(fd, in.in_range<off_t>(0, size - 1)) == 0, "truncate");
  }
  ::close(fd);
}

// ---- invariants

inline bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

inline bool same_checkpoint(const Checkpoint& a, const Checkpoint& b) {
  if (a.format_version != b.format_version || a.completed_steps != b.completed_steps || !(a.sampler == b.sampler) ||
      a.model.name != b.model.name || a.model.layers != b.model.layers || a.model.hidden != b.model.hidden ||
      a.model.heads != b.model.heads || a.model.vocabulary != b.model.vocabulary ||
      a.model.sequence_length != b.model.sequence_length || a.config_text != b.config_text ||
      a.plan_text != b.plan_text || a.weights_only != b.weights_only || a.tensors.size() != b.tensors.size()) {
    return false;
  }
  for (const CheckpointTensor& x : a.tensors) {  // by name: a folder's reader lists them shard by shard
    const CheckpointTensor* found = b.find(x.name);
    if (found == nullptr) return false;
    const CheckpointTensor& y = *found;
    if ( x.shape != y.shape || !same_floats(x.value, y.value) ||
        !same_floats(x.first_moment, y.first_moment) || !same_floats(x.second_moment, y.second_moment)) {
      return false;
    }
  }
  return true;
}

// Checksums: every float array a reader accepted is one the base
// checkpoint wrote (a value or moment of some tensor; links may move them),
// never one with a flipped byte.
inline void check_unchanged_floats(const Checkpoint& accepted, const Checkpoint& base) {
  // Version 1 files were written before checksums and are read unverified
  // (an edit that also strips a tensor's checksum is then not caught).
  if (accepted.format_version == 1) return;
  auto written = [&](const std::vector<float>& floats) {
    for (const CheckpointTensor& t : base.tensors) {
      for (const auto* b : {&t.value, &t.first_moment, &t.second_moment}) {
        if (same_floats(floats, *b)) return true;
      }
    }
    return false;
  };
  for (const CheckpointTensor& t : accepted.tensors) {
    for (const auto* values : {&t.value, &t.first_moment, &t.second_moment}) {
      FUZZ_CHECK(values->empty() || written(*values), t.name + ": floats the writer never wrote were accepted");
    }
  }
}

inline void check_accepted(const Checkpoint& c) {
  FUZZ_CHECK(c.format_version == io::kCheckpointFormatVersion || c.format_version == 1, std::to_string(c.format_version));
  FUZZ_CHECK(c.completed_steps >= 0 && c.sampler.epoch >= 0 && c.sampler.position >= 0, "negative step or sampler");
  FUZZ_CHECK(!c.tensors.empty(), "no tensors");
  std::set<std::string> names;
  for (const CheckpointTensor& t : c.tensors) {
    FUZZ_CHECK(names.insert(t.name).second, t.name + ": twice");
    FUZZ_CHECK(!t.shape.empty() && t.shape.size() <= 4, t.name + ": rank " + std::to_string(t.shape.size()));
    std::uint64_t elements = 1;
    bool overflow = false;
    for (int d : t.shape) {
      FUZZ_CHECK(d >= 1, t.name + ": dimension " + std::to_string(d));
      overflow |= __builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements);
    }
    FUZZ_CHECK(!overflow && t.value.size() == elements, t.name + ": " + std::to_string(t.value.size()) + " floats");
    // A weights-only file (attribute weights_only = 1) has no moments.
    for (const auto* values : {&t.first_moment, &t.second_moment}) {
      const std::size_t want = c.weights_only ? 0 : elements;
      FUZZ_CHECK(values->size() == want, t.name + ": " + std::to_string(values->size()) + " moment floats");
    }
  }
  const ScratchFile again(std::string_view{});
  io::write_checkpoint_file(again.path(), c);
  FUZZ_CHECK(same_checkpoint(c, io::read_checkpoint_file(again.path())), "changed by a write and read");
}

}  // namespace geotrain::fuzz
