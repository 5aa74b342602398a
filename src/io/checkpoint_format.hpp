// The parts of checkpoint.cpp's format that the collective writer
// (parallel_checkpoint.cpp) shares (internal to io).
#pragma once
#include <hdf5.h>

#include <functional>
#include <string>

#include "geotrain/io/checkpoint.hpp"
#include "hdf5_support.hpp"

namespace geotrain::io::detail {

// The root attributes of a whole checkpoint (a single file, or a manifest).
void write_checkpoint_attributes(hid_t file, const Checkpoint& c, const std::string& context);
// A shard's root attributes: format_version, completed_steps, shard = 1.
void write_shard_attributes(hid_t file, const Checkpoint& c, const std::string& context);
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

}  // namespace geotrain::io::detail
