// The checkpoint directory: step_N.h5 files and step_N folders of shards
// with their manifest, written under a temporary name and renamed, `latest`
// naming the newest, older ones pruned; and reading a checkpoint back from
// a file or a folder.
#include <hdf5.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/checkpoint.hpp"
#include "geotrain/io/parallel_checkpoint.hpp"
#include "checkpoint_format.hpp"
#include "hdf5_support.hpp"

namespace geotrain::io {
namespace {

namespace fs = std::filesystem;
using namespace hdf5;

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
  const Handle file = detail::open_checkpoint_file(path);
  detail::read_format_version(file, path);
  if (H5Aexists(file, "shard") <= 0) throw InputError(path + ": attribute shard: missing (not a checkpoint shard)");
  if (detail::read_int_attribute(file, "completed_steps", path) != c.completed_steps) {
    throw InputError(path + ": attribute completed_steps: differs from " + manifest + "'s " +
                     std::to_string(c.completed_steps) + " (a shard of another checkpoint)");
  }
  detail::read_moment_tensors(file, path, c);
  detail::read_residuals(file, path, c);
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
  std::istringstream shards(detail::read_string_attribute(file, "shards", manifest));
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
  const Handle file = detail::open_checkpoint_file(manifest);
  Checkpoint c = detail::read_checkpoint_attributes(file, manifest);
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
  return shards_listed(detail::open_checkpoint_file(manifest), manifest);
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
    detail::write_tensors(file, part, temporary);
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
    detail::write_checkpoint_attributes(file, metadata, temporary);
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

Checkpoint read_checkpoint_header(const std::string& path) {
  const auto hdf5_in_use = use_library();
  const fs::path given(path);
  const std::string root = fs::is_directory(given) ? (given / kManifestName).string() : path;
  const Handle file = detail::open_checkpoint_file(root);
  return detail::read_checkpoint_attributes(file, root);
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

void write_then_rename(const std::string& path, const std::function<void(const std::string&)>& write,
                       const TensorsWritten& tensors_written) {
  io::write_then_rename(path, write, tensors_written);
}

void make_folder(const std::string& folder, const std::string& what) { io::make_folder(folder, what); }

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
