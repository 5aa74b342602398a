// The parts of the checkpoint format that its writers and readers share
// (internal to io): the one-file format (checkpoint.cpp), the directory of
// steps, shards and manifests (checkpoint_directory.cpp) and the collective
// writer (parallel_checkpoint.cpp).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <future>
#include <span>
#include <string>
#include <vector>

#include "geotrain/io/checkpoint.hpp"
#include "hdf5_support.hpp"

namespace geotrain::io::detail {

// The root attributes of a whole checkpoint (a single file, or a manifest).
void write_checkpoint_attributes(hid_t file, const Checkpoint& c, const std::string& context);
// A shard's root attributes: format_version, completed_steps, shard = 1.
void write_shard_attributes(hid_t file, const Checkpoint& c, const std::string& context);
// /params (and /optimizer/m, /optimizer/v unless weights only), then /error_feedback.
void write_tensors(hid_t file, const Checkpoint& c, const std::string& context);
// `write` fills `path`.tmp, which is flushed to disk and renamed to `path`;
// `tensors_written` is called between the two.
void write_then_rename(const std::string& path, const std::function<void(const std::string&)>& write,
                       const TensorsWritten& tensors_written = {});
// create_directories, RunError naming `folder` and `what` on failure.
void make_folder(const std::string& folder, const std::string& what);
// An HDF5 group, closed with its handle; errors name `context`.
hdf5::Handle create_group(hid_t parent, const char* name, const std::string& context);
// std::invalid_argument naming `writer` and the tensor unless it holds
// element_count(shape) floats, and as many of each moment `with_moments`.
void check_tensor_size(const CheckpointTensor& t, bool with_moments, const char* writer);

// The CRC-32 (zlib's) of the floats' bytes: every tensor dataset's crc32 attribute.
std::int64_t crc32_of(std::span<const float> data);

// crc32_of each span, computed on a helper thread while the caller writes
// the same bytes: where a core is free the checksums cost the writer almost
// no time (analysis/results/checkpoint-checksums.md). The spans must not
// change until get() has returned; destruction waits for the thread
// (std::async's future), also when the writer throws.
class DigestsInBackground {
 public:
  explicit DigestsInBackground(std::vector<std::span<const float>> spans);
  std::vector<std::int64_t> get();  // once: the digests in the spans' order

 private:
  std::future<std::vector<std::int64_t>> digests_;
};

// Reading: every failure is an InputError naming `path` and the object.
// The file at `path`, read-only (it must exist and be HDF5).
hdf5::Handle open_checkpoint_file(const std::string& path);
// The root's format_version, which must be kCheckpointFormatVersion.
std::int64_t read_format_version(hid_t file, const std::string& path);
// A single-valued integer or string attribute `name` of `object`.
std::int64_t read_int_attribute(hid_t object, const char* name, const std::string& path);
std::string read_string_attribute(hid_t object, const char* name, const std::string& path);
// The root attributes (write_checkpoint_attributes') of a single file or a manifest.
Checkpoint read_checkpoint_attributes(hid_t file, const std::string& path);
// Every /params tensor with its two moments, appended to c.tensors.
void read_moment_tensors(hid_t file, const std::string& path, Checkpoint& c);
// /error_feedback, where the file has one, into c.residuals and c.residual_layout.
void read_residuals(hid_t file, const std::string& path, Checkpoint& c);

}  // namespace geotrain::io::detail
