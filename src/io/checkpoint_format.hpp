// The parts of checkpoint.cpp's format that the collective writer
// (parallel_checkpoint.cpp) shares (internal to io).
#pragma once
#include <hdf5.h>

#include <functional>
#include <string>

#include "geotrain/io/checkpoint.hpp"

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

}  // namespace geotrain::io::detail
