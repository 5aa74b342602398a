// Resuming the per-site form where the sites share no folder: each site's
// folder holds the manifest and its own shard only. Before the checkpoint
// is read, every shard a folder lacks is sent to one rank that sees that
// folder by a rank whose folder holds it, and written there (tmp, fsync,
// rename): after that every rank reads the whole checkpoint as on a shared
// file system, on any layout. Only the missing shards cross between sites,
// once per resume.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/checkpoint.hpp"
#include "geotrain/mpi/mpi_check.hpp"
#include "geotrain/job/mpi_checkpoints.hpp"
#include "geotrain/mpi/mpi_plan.hpp"

namespace geotrain::runtime {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kPiece = std::size_t{1} << 30;  // MPI counts are int: pieces of 1 GiB
constexpr int kResumeShardTag = 7301;

std::vector<std::uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
std::string text_of(const std::vector<std::uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

// What one rank sees: the checkpoint it would resume from (step name, ""
// when it would start afresh or cannot tell), and which listed shards its
// folder holds. Lines: name, then one "<shard>\t<0|1>" per listed shard.
struct View {
  std::string name;
  std::vector<std::pair<std::string, bool>> shards;
};

std::string describe(const View& v) {
  std::string out = v.name + "\n";
  for (const auto& [shard, present] : v.shards) out += shard + "\t" + (present ? "1" : "0") + "\n";
  return out;
}

View parse(const std::string& text) {
  View v;
  std::istringstream lines(text);
  std::getline(lines, v.name);
  for (std::string line; std::getline(lines, line);) {
    const auto tab = line.rfind('\t');
    if (tab != std::string::npos) v.shards.emplace_back(line.substr(0, tab), line.substr(tab + 1) == "1");
  }
  return v;
}

constexpr const char* kUnknown = "?";  // this rank could not resolve checkpoint.resume

View look(const std::string& path, bool resolved) {
  View v;
  if (path.empty()) {
    if (!resolved) v.name = std::string(kUnknown);
    return v;
  }
  v.name = fs::path(path).filename().string();
  if (!fs::is_directory(path)) return v;
  try {
    for (const std::string& shard : io::listed_shards(path)) v.shards.emplace_back(shard, fs::exists(fs::path(path) / shard));
  } catch (const std::exception&) {
    // No readable manifest here: the read that follows names the problem.
  }
  return v;
}

struct Transfer {
  std::string shard;
  int from = 0, to = 0;
};

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw RunError(path + ": cannot read the shard to send it");
  return bytes;
}

void send_bytes(const std::vector<std::uint8_t>& bytes, int to, double deadline_s, const std::string& what) {
  std::uint64_t size = bytes.size();
  MPI_Request request;
  GT_MPI_CHECK(MPI_Isend(&size, 1, MPI_UINT64_T, to, kResumeShardTag, MPI_COMM_WORLD, &request));
  wait_all_or_abort({&request, 1}, deadline_s, what, to);
  for (std::size_t at = 0; at < bytes.size(); at += kPiece) {
    const int count = static_cast<int>(std::min(kPiece, bytes.size() - at));
    GT_MPI_CHECK(MPI_Isend(bytes.data() + at, count, MPI_BYTE, to, kResumeShardTag, MPI_COMM_WORLD, &request));
    wait_all_or_abort({&request, 1}, deadline_s, what, to);
  }
}

std::vector<std::uint8_t> receive_bytes(int from, double deadline_s, const std::string& what) {
  std::uint64_t size = 0;
  MPI_Request request;
  GT_MPI_CHECK(MPI_Irecv(&size, 1, MPI_UINT64_T, from, kResumeShardTag, MPI_COMM_WORLD, &request));
  wait_all_or_abort({&request, 1}, deadline_s, what, from);
  std::vector<std::uint8_t> bytes(size);
  for (std::size_t at = 0; at < bytes.size(); at += kPiece) {
    const int count = static_cast<int>(std::min(kPiece, bytes.size() - at));
    GT_MPI_CHECK(MPI_Irecv(bytes.data() + at, count, MPI_BYTE, from, kResumeShardTag, MPI_COMM_WORLD, &request));
    wait_all_or_abort({&request, 1}, deadline_s, what, from);
  }
  return bytes;
}

// On rank 0: who sends which shard to whom, or an error. `visible[r]`: the
// ranks whose files rank r sees in its folder (r's view).
std::string plan_transfers(const std::vector<View>& views, const std::vector<std::vector<int>>& visible,
                           const std::string& resume_path, std::vector<Transfer>& transfers) {
  std::map<std::string, std::vector<int>> holders;
  for (std::size_t r = 0; r < views.size(); ++r) {
    for (const auto& [shard, present] : views[r].shards) {
      auto& list = holders[shard];
      if (present) list.push_back(static_cast<int>(r));
    }
  }
  std::set<std::pair<std::string, int>> served;  // (shard, the lowest rank of a view): one copy per folder
  std::map<std::string, std::size_t> turn;
  for (std::size_t r = 0; r < views.size(); ++r) {
    const int receiver = visible[r].empty() ? static_cast<int>(r) : *std::min_element(visible[r].begin(), visible[r].end());
    for (const auto& [shard, present] : views[r].shards) {
      if (present || served.count({shard, receiver})) continue;
      const std::vector<int>& from = holders[shard];
      if (from.empty()) {
        return (fs::path(resume_path) / shard).string() + ": missing (a shard that " +
               (fs::path(resume_path) / "manifest.h5").string() +
               " lists; no rank's folder holds it: the checkpoint is incomplete)";
      }
      served.insert({shard, receiver});
      transfers.push_back({shard, from[turn[shard]++ % from.size()], receiver});  // spread over the holders
    }
  }
  return "";
}

// On rank 0: "" when every rank resumes from the same checkpoint and its
// folder holds every listed shard, "probe" when some shard is missing
// somewhere, "error\t<line>" when the ranks would resume from different ones.
std::string compare_views(const std::vector<View>& views, const std::string& dir, const std::string& resume) {
  for (std::size_t r = 0; r < views.size(); ++r) {
    if (views[r].name != views[0].name && views[r].name != kUnknown && views[0].name != kUnknown) {
      auto from = [](const std::string& name) { return name.empty() ? std::string("nothing (a fresh start)") : name; };
      return "error\tcheckpoint.resume = " + resume + ": rank 0 resumes from " + from(views[0].name) +
             " but rank " + std::to_string(r) + " from " + from(views[r].name) + " (their views of " + dir +
             " differ; name one checkpoint that every site holds, e.g. --checkpoint.resume=" + dir +
             "/step_<N>)";
    }
  }
  for (const View& view : views) {  // the same checkpoint everywhere: complete it
    for (const auto& [shard, present] : view.shards) {
      if (!present) return "probe";
    }
  }
  return "";
}

// Collective: which ranks share a folder (one of them receives each missing
// shard), then rank 0's plan, on every rank: one "<shard>\t<from>\t<to>"
// line per transfer, or "error\t<line>". `views`: rank 0's gathered ones.
std::string share_transfer_plan(const std::vector<View>& views, const std::string& path, int rank,
                                double deadline_s) {
  const CheckpointFolderView view =
      probe_checkpoint_folder(fs::path(path).parent_path().string(), MPI_COMM_WORLD, {}, deadline_s);
  std::string visible_text;
  for (int p : view.visible) visible_text += std::to_string(p) + " ";
  const auto visible_parts = gather_bytes(MPI_COMM_WORLD, bytes_of(visible_text), 0, deadline_s, "comparing checkpoint folders");
  std::string plan;
  if (rank == 0) {
    std::vector<std::vector<int>> visible;
    for (const auto& part : visible_parts) {
      std::istringstream numbers(text_of(part));
      visible.emplace_back();
      for (int p; numbers >> p;) visible.back().push_back(p);
    }
    std::vector<Transfer> transfers;
    const std::string error = plan_transfers(views, visible, path, transfers);
    if (!error.empty()) {
      plan = "error\t" + error;
    } else {
      for (const Transfer& t : transfers) plan += t.shard + "\t" + std::to_string(t.from) + "\t" + std::to_string(t.to) + "\n";
    }
  }
  return text_of(broadcast_bytes(MPI_COMM_WORLD, bytes_of(plan), 0, deadline_s, "sharing the checkpoint's shards"));
}

// Runs `plan`'s transfers in one order on every rank, so that each
// transfer's two ranks meet in it; returns this rank's first error, or "".
std::string run_transfers(const std::string& plan, const std::string& path, int rank, double deadline_s) {
  std::string error;
  std::istringstream lines(plan);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    Transfer t;
    std::getline(fields, t.shard, '\t');
    fields >> t.from >> t.to;
    const std::string target = (fs::path(path) / t.shard).string();
    const std::string what = "sending checkpoint shard " + t.shard + " from rank " + std::to_string(t.from) +
                             " to rank " + std::to_string(t.to);
    if (t.from == rank) {
      std::vector<std::uint8_t> bytes;
      try {
        bytes = read_file(target);
      } catch (const std::exception& e) {
        if (error.empty()) error = e.what();
      }
      send_bytes(bytes, t.to, deadline_s, what);  // empty on failure: the receiver writes nothing
    } else if (t.to == rank) {
      const std::vector<std::uint8_t> bytes = receive_bytes(t.from, deadline_s, what);
      try {
        if (!bytes.empty()) io::write_file_durably(target, bytes);
      } catch (const std::exception& e) {
        if (error.empty()) error = std::string(e.what()) + " (the shard received from another site)";
      }
    }
  }
  return error;
}

}  // namespace

int fetch_missing_shards(const std::string& dir, const std::string& resume, double deadline_s) {
  int rank = 0, size = 1;
  GT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  GT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  if (size == 1 || resume.empty()) return 0;
  std::string path;
  bool resolved = true;
  try {
    path = io::resolve_resume(dir, resume);
  } catch (const std::exception&) {
    resolved = false;  // reported by the read that follows, on this rank
  }
  const View mine = look(path, resolved);
  const auto parts = gather_bytes(MPI_COMM_WORLD, bytes_of(describe(mine)), 0, deadline_s, "comparing checkpoint folders");
  std::string verdict;
  std::vector<View> views;
  if (rank == 0) {
    for (const auto& part : parts) views.push_back(parse(text_of(part)));
    verdict = compare_views(views, dir, resume);
  }
  verdict = text_of(broadcast_bytes(MPI_COMM_WORLD, bytes_of(verdict), 0, deadline_s, "comparing checkpoint folders"));
  if (verdict.rfind("error\t", 0) == 0) {
    return agree_on_failure(rank == 0 ? verdict.substr(6) : "", kExitInputError, deadline_s,
                            "comparing checkpoint folders");
  }
  if (verdict.empty()) return 0;
  const std::string plan = share_transfer_plan(views, path, rank, deadline_s);
  if (plan.rfind("error\t", 0) == 0) {
    return agree_on_failure(rank == 0 ? plan.substr(6) : "", kExitInputError, deadline_s,
                            "sharing the checkpoint's shards");
  }
  return agree_on_failure(run_transfers(plan, path, rank, deadline_s), kExitRunError, deadline_s,
                          "sharing the checkpoint's shards");
}

}  // namespace geotrain::runtime
