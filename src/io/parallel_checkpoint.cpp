// Built only with the parallel HDF5 library (CMakeLists.txt: HDF5_IS_PARALLEL).
#include "geotrain/io/parallel_checkpoint.hpp"

#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "checkpoint_format.hpp"
#include "hdf5_support.hpp"

namespace geotrain::io {
namespace {

using namespace hdf5;
namespace fs = std::filesystem;

// One dataset of the file (with its two moments for a parameter), and the
// member that writes it.
struct Entry {
  int owner = 0;
  bool residual = false;
  bool moments = false;
  std::string name;
  std::vector<hsize_t> dims;
  std::vector<std::int64_t> crc32;  // of the value, then of each moment (member 0's, after the write)
};

// The groups that hold an entry's datasets, in the order of its checksums.
std::vector<std::string> groups_of(const Entry& e) {
  if (e.residual) return {"error_feedback"};
  if (e.moments) return {"params", "optimizer/m", "optimizer/v"};
  return {"params"};
}

// The bytes of `part` in the order of its entries: each tensor's value and
// moments, then the residuals.
std::vector<std::span<const float>> spans_of(const Checkpoint& part) {
  std::vector<std::span<const float>> spans;
  for (const CheckpointTensor& t : part.tensors) {
    spans.push_back(t.values());
    if (!t.first_moments().empty()) spans.push_back(t.first_moments()), spans.push_back(t.second_moments());
  }
  for (const CheckpointTensor& t : part.residuals) spans.push_back(t.values());
  return spans;
}

// "name\tresidual\tmoments\td0,d1,...\n" per tensor (names hold neither tabs
// nor newlines: they are geotrain's own parameter and residual names).
std::string describe(const Checkpoint& part) {
  std::ostringstream out;
  auto line = [&](const CheckpointTensor& t, bool residual, std::size_t count) {
    out << t.name << '\t' << residual << '\t' << !t.first_moments().empty() << '\t';
    if (residual) {
      out << count;
    } else {
      for (std::size_t i = 0; i < t.shape.size(); ++i) out << (i ? "," : "") << t.shape[i];
    }
    out << '\n';
  };
  for (const CheckpointTensor& t : part.tensors) line(t, false, 0);
  for (const CheckpointTensor& t : part.residuals) line(t, true, t.value.size());
  return out.str();
}

std::vector<Entry> parse(const std::string& text, int owner) {
  std::vector<Entry> entries;
  std::istringstream lines(text);
  for (std::string row; std::getline(lines, row);) {
    std::istringstream fields(row);
    Entry e;
    e.owner = owner;
    std::string dims;
    std::getline(fields, e.name, '\t');
    fields >> e.residual >> e.moments;
    fields.ignore(1);
    std::getline(fields, dims);
    std::istringstream each(dims);
    for (std::string d; std::getline(each, d, ',');) e.dims.push_back(std::stoull(d));
    entries.push_back(std::move(e));
  }
  return entries;
}

void check_mpi(int code, const char* what, const std::string& path) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw RunError(path + ": " + what + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

// Every member's entries, in member order (a collective: the same list on all).
std::vector<Entry> gather_entries(MPI_Comm comm, const Checkpoint& part, const std::string& path) {
  const std::string mine = describe(part);
  int members = 0;
  check_mpi(MPI_Comm_size(comm, &members), "MPI_Comm_size", path);
  std::vector<int> lengths(static_cast<std::size_t>(members)), offsets(lengths.size());
  const int length = static_cast<int>(mine.size());
  check_mpi(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm), "exchanging tensor names", path);
  int total = 0;
  for (int r = 0; r < members; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += lengths[static_cast<std::size_t>(r)];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  check_mpi(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, comm),
            "exchanging tensor names", path);
  std::vector<Entry> entries;
  for (int r = 0; r < members; ++r) {
    for (Entry& e : parse(all.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]),
                                     static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)])),
                          r)) {
      entries.push_back(std::move(e));
    }
  }
  return entries;
}

// Every member's digests (in its entries' order) into member 0's entries.
void gather_digests(MPI_Comm comm, const std::vector<std::int64_t>& mine, std::vector<Entry>& entries,
                    const std::string& path) {
  int members = 0, me = 0;
  check_mpi(MPI_Comm_size(comm, &members), "MPI_Comm_size", path);
  check_mpi(MPI_Comm_rank(comm, &me), "MPI_Comm_rank", path);
  std::vector<int> counts(static_cast<std::size_t>(members)), offsets(counts.size());
  const int count = static_cast<int>(mine.size());
  check_mpi(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm), "exchanging checksums", path);
  int total = 0;
  for (int r = 0; r < members; ++r) offsets[static_cast<std::size_t>(r)] = total, total += counts[static_cast<std::size_t>(r)];
  std::vector<std::int64_t> all(static_cast<std::size_t>(me == 0 ? total : 0));
  check_mpi(MPI_Gatherv(mine.data(), count, MPI_INT64_T, all.data(), counts.data(), offsets.data(), MPI_INT64_T, 0, comm),
            "exchanging checksums", path);
  if (me != 0) return;
  for (Entry& e : entries) {
    const std::size_t datasets = groups_of(e).size();
    auto& next = offsets[static_cast<std::size_t>(e.owner)];
    for (std::size_t i = 0; i < datasets && next < total; ++i) e.crc32.push_back(all[static_cast<std::size_t>(next++)]);
  }
}

Handle create_dataset(hid_t group, const Entry& e, const std::string& context) {
  Handle space(GT_H5_CHECK(H5Screate_simple(static_cast<int>(e.dims.size()), e.dims.data(), nullptr), context, false),
               H5Sclose);
  return Handle(GT_H5_CHECK(H5Dcreate2(group, e.name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT,
                                       H5P_DEFAULT),
                            context + "/" + e.name, false),
                H5Dclose);
}

// The collective part: every member creates every group and dataset (HDF5's
// metadata is collective), then writes its own data; an error in its own
// writes is returned, not thrown, so that it still takes part in the
// collective closes that follow.
std::string write_datasets(MPI_Comm comm, const std::string& temporary, const Checkpoint& part,
                           const std::vector<Entry>& entries, int me, const TensorsWritten& tensors_written) {
  Handle access(GT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), temporary, false), H5Pclose);
  GT_H5_CHECK(H5Pset_fapl_mpio(access, comm, MPI_INFO_NULL), temporary, false);
  Handle file(GT_H5_CHECK(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access), temporary, false),
              H5Fclose);
  bool any_residual = false;
  for (const Entry& e : entries) any_residual = any_residual || e.residual;
  // Training checkpoints always carry the moments' groups, also in a shard
  // that holds no tensor (a site whose ranks write none).
  Handle params = detail::create_group(file, "params", temporary);
  Handle optimizer = detail::create_group(file, "optimizer", temporary);
  Handle m = detail::create_group(optimizer, "m", temporary);
  Handle v = detail::create_group(optimizer, "v", temporary);
  Handle residuals = any_residual ? detail::create_group(file, "error_feedback", temporary) : Handle();

  // Datasets in one order on every member; this member's data beside its own.
  struct Target {
    Handle dataset;
    std::span<const float> data;
  };
  std::vector<Target> targets;
  std::size_t my_tensor = 0, my_residual = 0;
  for (const Entry& e : entries) {
    const bool mine = e.owner == me;
    if (e.residual) {
      targets.push_back({create_dataset(residuals, e, temporary + ": /error_feedback"),
                         mine ? std::span<const float>(part.residuals[my_residual++].value) : std::span<const float>()});
      continue;
    }
    const CheckpointTensor* t = mine ? &part.tensors[my_tensor++] : nullptr;
    targets.push_back({create_dataset(params, e, temporary + ": /params"), t ? t->values() : std::span<const float>()});
    if (!e.moments) continue;
    targets.push_back({create_dataset(m, e, temporary + ": /optimizer/m"), t ? t->first_moments() : std::span<const float>()});
    targets.push_back({create_dataset(v, e, temporary + ": /optimizer/v"), t ? t->second_moments() : std::span<const float>()});
  }
  std::string error;
  for (const Target& target : targets) {
    if (target.data.empty() || !error.empty()) continue;
    // Independent I/O (the default transfer): the owner writes its bytes
    // straight into the file, where collective buffering would ship them
    // to aggregating ranks first (across sites, in the parallel form).
    if (H5Dwrite(target.dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, target.data.data()) < 0) {
      error = temporary + ": writing a dataset failed (" + std::to_string(target.data.size()) + " floats)";
    }
  }
  // H5Dwrite over MPI-IO returns once its buffer may be reused: the
  // tensors can change while the members close the file together.
  if (tensors_written) tensors_written();
  return error;  // the datasets, groups and file close collectively here, in one order on every member
}

// Serially, after the collective close: the attributes (from this member's
// `part`) that every member would otherwise have to pass identically.
// Each dataset's crc32 attribute, from its owner's digests.
void write_checksums(hid_t file, const std::vector<Entry>& entries, const std::string& temporary) {
  for (const Entry& e : entries) {
    const std::vector<std::string> groups = groups_of(e);
    if (e.crc32.size() != groups.size()) throw RunError(temporary + ": /params/" + e.name + ": checksums not exchanged");
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const std::string path = groups[i] + "/" + e.name;
      Handle set(GT_H5_CHECK(H5Dopen2(file, path.c_str(), H5P_DEFAULT), temporary + ": /" + path, false), H5Dclose);
      write_int_attribute(set, "crc32", e.crc32[i], temporary + ": /" + path);
    }
  }
}

void write_attributes(const std::string& temporary, const Checkpoint& part, CollectiveFile kind,
                      const std::vector<Entry>& entries, bool any_residual) {
  Handle file(GT_H5_CHECK(H5Fopen(temporary.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), temporary, false), H5Fclose);
  write_checksums(file, entries, temporary);
  if (kind == CollectiveFile::whole) {
    detail::write_checkpoint_attributes(file, part, temporary);
  } else {
    detail::write_shard_attributes(file, part, temporary);
  }
  if (any_residual) {
    Handle group(GT_H5_CHECK(H5Gopen2(file, "error_feedback", H5P_DEFAULT), temporary, false), H5Gclose);
    write_string_attribute(group, "layout", part.residual_layout, temporary + ": /error_feedback");
  }
  GT_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL), temporary, false);
}

}  // namespace

bool parallel_hdf5_built() { return true; }

void write_checkpoint_collectively(int fortran_comm, const std::string& path, const Checkpoint& part,
                                   CollectiveFile kind, const TensorsWritten& tensors_written) {
  const MPI_Comm comm = MPI_Comm_f2c(fortran_comm);
  int me = 0;
  check_mpi(MPI_Comm_rank(comm, &me), "MPI_Comm_rank", path);
  const std::string temporary = path + ".tmp";
  for (const CheckpointTensor& t : part.tensors) {
    detail::check_tensor_size(t, !t.first_moments().empty() || !t.second_moments().empty(), "write_checkpoint_collectively");
  }
  std::string error;
  try {
    detail::make_folder(fs::path(path).parent_path().string(), "the checkpoint's folder");
  } catch (const std::exception& e) {
    error = e.what();
  }
  // Agree before the collective create: a member without the folder would
  // leave the others waiting in it.
  int failed = error.empty() ? 0 : 1, any_failed = 0;
  check_mpi(MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, comm), "agreeing on the checkpoint", path);
  if (any_failed) throw RunError(error.empty() ? path + ": another rank could not create its folder" : error);

  detail::DigestsInBackground digests(spans_of(part));  // while the index is exchanged and the bytes written
  std::vector<Entry> entries = gather_entries(comm, part, path);
  bool any_residual = false;
  for (const Entry& e : entries) any_residual = any_residual || e.residual;
  {
    const auto hdf5_in_use = use_library();
    std::vector<std::int64_t> my_digests;
    error = write_datasets(comm, temporary, part, entries, me, [&] {
      my_digests = digests.get();  // before the tensors may change
      if (tensors_written) tensors_written();
    });
    failed = error.empty() ? 0 : 1;
    check_mpi(MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, comm), "agreeing on the checkpoint", path);
    gather_digests(comm, my_digests, entries, path);
    if (!any_failed && me == 0) {
      try {
        write_attributes(temporary, part, kind, entries, any_residual);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
  }
  if (me == 0 && error.empty() && !any_failed) {
    detail::write_then_rename(path, [](const std::string&) {});  // fsync, rename: the file is complete
    return;
  }
  if (me == 0) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
  }
  if (!error.empty()) throw RunError(error);
  if (any_failed) throw RunError(path + ": another rank's part of the file failed to write");
}

}  // namespace geotrain::io
