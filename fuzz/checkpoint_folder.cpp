// Sharded checkpoint folders (io/checkpoint.hpp: the sharded and per-site
// forms): read_checkpoint and listed_shards on damaged copies of a small
// valid folder (manifest.h5 listing two shards, each holding some of the
// tensors). The input chooses, per edit, a file of the folder and an edit
// of checkpoint.cpp's harness on it (attributes, datasets, links, byte flips,
// truncation), or an edit only a folder has: the manifest's list of shards
// rewritten (missing, repeated, empty, path-like or foreign names, the
// manifest itself), a shard deleted, or one shard copied over another (its
// tensors then held twice; completed_steps possibly another checkpoint's).
//
// Invariants of an accepted folder: those of checkpoint.cpp's accepted file
// (it writes back and reads again unchanged), plus: listed_shards agrees
// with the read (some shard listed; each a plain file name of the folder).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint_edits.hpp"
#include "geotrain/common/errors.hpp"

namespace {

using namespace geotrain::fuzz;
namespace fs = std::filesystem;
namespace io = geotrain::io;

const char* const kFiles[] = {"manifest.h5", "rank_00000.h5", "rank_00001.h5"};
const char* const kListed[] = {"rank_00000.h5", "rank_00001.h5", "rank_00000.h5", "manifest.h5", "missing.h5",
                               "../rank_00000.h5", "sub/rank_00001.h5", "", ".", "rank_00001.h5\r"};

// The valid folder's files, written once by geotrain's own writers.
const std::vector<std::vector<std::uint8_t>>& base_files() {
  static const std::vector<std::vector<std::uint8_t>> files = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // failed edits are expected; their stacks are noise
    const fs::path dir = fs::temp_directory_path() / ("geotrain-fuzz-base-" + std::to_string(::getpid()));
    Checkpoint whole = base_checkpoint();
    Checkpoint first = whole, second = whole;
    first.tensors.assign(whole.tensors.begin(), whole.tensors.begin() + 2);
    second.tensors.assign(whole.tensors.begin() + 2, whole.tensors.end());
    io::write_checkpoint_shard(dir.string(), first, 0);
    io::write_checkpoint_shard(dir.string(), second, 1);
    whole.tensors.clear();
    io::publish_sharded_checkpoint(dir.string(), whole, {kFiles[1], kFiles[2]}, 1, {kFiles[1], kFiles[2]});
    std::vector<std::vector<std::uint8_t>> bytes;
    for (const char* name : kFiles) {
      std::ifstream in(dir / io::step_name(whole.completed_steps, true) / name, std::ios::binary);
      bytes.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    fs::remove_all(dir);
    return bytes;
  }();
  return files;
}

// A scratch copy of the folder, removed on scope exit.
class ScratchFolder {
 public:
  ScratchFolder() {
    std::string pattern = (fs::temp_directory_path() / "geotrain-fuzz-folder-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) invariant_failed("mkdtemp", pattern, __FILE__, __LINE__);
    path_ = pattern;
    for (std::size_t i = 0; i < std::size(kFiles); ++i) {
      std::ofstream out(path_ / kFiles[i], std::ios::binary);
      out.write(reinterpret_cast<const char*>(base_files()[i].data()), static_cast<std::streamsize>(base_files()[i].size()));
    }
  }
  ~ScratchFolder() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void rewrite_listed_shards(const fs::path& manifest, FuzzInput& in) {
  H5Handle file(H5Fopen(manifest.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) return;
  std::string listed;
  const int count = in.in_range(0, 4);
  for (int i = 0; i < count; ++i) {
    if (i > 0) listed += '\n';
    listed += in.pick(kListed);
  }
  if (in.flag()) listed += "\n";
  H5Adelete(file, "shards");
  H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type, H5T_VARIABLE);
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const char* text = listed.c_str();
  write_attribute(file, "shards", type, space, type, &text);
}

void damage_folder(const fs::path& folder, FuzzInput& in) {
  const int edits = in.in_range(0, 4);
  for (int i = 0; i < edits; ++i) {
    std::error_code ignored;
    switch (in.in_range(0, 4)) {
      case 0: rewrite_listed_shards(folder / kFiles[0], in); break;
      case 1: fs::remove(folder / in.pick(kFiles), ignored); break;
      case 2: fs::copy_file(folder / kFiles[1], folder / kFiles[2], fs::copy_options::overwrite_existing, ignored); break;
      default: {
        const fs::path file = folder / in.pick(kFiles);
        if (fs::exists(file)) damage(file.string(), in, false);
        break;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  const ScratchFolder folder;
  damage_folder(folder.path(), in);
  std::vector<std::string> listed;
  try {
    listed = geotrain::io::listed_shards(folder.path().string());
  } catch (const geotrain::InputError&) {
  }
  Checkpoint checkpoint;
  try {
    checkpoint = geotrain::io::read_checkpoint(folder.path().string());
  } catch (const geotrain::InputError&) {
    return 0;
  }
  FUZZ_CHECK(!listed.empty(), "read a folder whose manifest lists no shard");
  for (const std::string& shard : listed) {
    FUZZ_CHECK(fs::path(shard).filename() == shard && fs::is_regular_file(folder.path() / shard),
               "accepted a listed shard that is not a file of the folder: " + shard);
  }
  check_accepted(checkpoint);
  check_unchanged_floats(checkpoint, base_checkpoint());
  return 0;
}
