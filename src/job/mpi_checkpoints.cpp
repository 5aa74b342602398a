#include "geotrain/job/mpi_checkpoints.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <utility>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/checkpoint.hpp"
#include "geotrain/io/parallel_checkpoint.hpp"
#include "geotrain/mpi/mpi_check.hpp"
#include "geotrain/mpi/mpi_plan.hpp"
#include "geotrain/runtime/site_groups.hpp"

namespace geotrain::runtime {

int agree_on_failure(const std::string& error, int code, double deadline_s, const std::string& what,
                     MPI_Comm comm) {
  int rank = 0, size = 1;
  GT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  GT_MPI_CHECK(MPI_Comm_size(comm, &size));
  int first_failed = error.empty() ? size : rank;
  MPI_Request request;
  GT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, comm, &request));
  wait_collective_or_abort({&request, 1}, comm, -1, deadline_s, what);
  if (first_failed == size) return 0;
  if (rank == first_failed) {
    std::cerr << "geotrain: error: " << error
              << (size > 1 ? " (rank " + std::to_string(world_rank()) + ", host " + host_name() + ")" : "") << "\n";
  }
  GT_MPI_CHECK(MPI_Ibcast(&code, 1, MPI_INT, first_failed, comm, &request));
  wait_collective_or_abort({&request, 1}, comm, first_failed, deadline_s, "agreeing on the exit code");
  return code;
}

std::vector<int> gather_flags(int flag, double deadline_s, const std::string& what, MPI_Comm comm) {
  int size = 1;
  GT_MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<int> flags(static_cast<std::size_t>(size));
  MPI_Request request;
  GT_MPI_CHECK(MPI_Iallgather(&flag, 1, MPI_INT, flags.data(), 1, MPI_INT, comm, &request));
  wait_collective_or_abort({&request, 1}, comm, -1, deadline_s, what);
  return flags;
}

CheckpointFolderView probe_checkpoint_folder(const std::string& dir, MPI_Comm job_comm,
                                             const std::vector<std::string>& site_of_position, double deadline_s) {
  namespace fs = std::filesystem;
  int position = 0, size = 1;
  GT_MPI_CHECK(MPI_Comm_rank(job_comm, &position));
  GT_MPI_CHECK(MPI_Comm_size(job_comm, &size));
  const std::string what = "checking which ranks share checkpoint.dir";
  // A name no earlier run left behind: rank 0's clock and process id.
  const int mine = position == 0 ? static_cast<int>((std::chrono::system_clock::now().time_since_epoch().count() ^
                                                     (static_cast<std::int64_t>(getpid()) << 20)) &
                                                    0x7fffffff)
                                 : 0;
  const int nonce = gather_flags(mine, deadline_s, what, job_comm).front();
  auto marker = [&](int p) {
    return fs::path(dir) / (".folder-probe-" + std::to_string(nonce) + "-" + std::to_string(p));
  };
  std::error_code ignored;
  fs::create_directories(dir, ignored);
  std::ofstream(marker(position)).put('\n');
  gather_flags(0, deadline_s, what, job_comm);  // every marker is written
  CheckpointFolderView view;
  for (int p = 0; p < size; ++p) {
    if (fs::exists(marker(p), ignored)) view.visible.push_back(p);
  }
  bool sees_site = true;
  for (int p = 0; p < size; ++p) {
    const bool same_site = site_of_position.empty() || site_of_position[static_cast<std::size_t>(p)] ==
                                                           site_of_position[static_cast<std::size_t>(position)];
    if (same_site && std::find(view.visible.begin(), view.visible.end(), p) == view.visible.end()) sees_site = false;
  }
  const bool sees_all = static_cast<int>(view.visible.size()) == size;
  const std::vector<int> flags = gather_flags((sees_all ? 1 : 0) | (sees_site ? 2 : 0), deadline_s, what, job_comm);
  fs::remove(marker(position), ignored);  // after everyone looked
  CheckpointPremises& premises = view.premises;
  premises.ranks = size;
  std::string blind;
  for (int p = 0; p < size; ++p) {
    premises.shared_folder = premises.shared_folder && (flags[static_cast<std::size_t>(p)] & 1);
    premises.sites_share_folder = premises.sites_share_folder && (flags[static_cast<std::size_t>(p)] & 2);
    if (!(flags[static_cast<std::size_t>(p)] & 1)) blind += (blind.empty() ? "" : ", ") + std::to_string(p);
  }
  if (!blind.empty()) {
    premises.folder_note = "training ranks " + blind + " do not see every rank's files in " + dir;
  }
  return view;
}

namespace {

// Checkpoints under MPI, written by a background thread (BackgroundWorker).
// "Rank 0" below is the first training rank (world rank 0 unless the layout
// leaves it idle).
//  - single: the ranks' tensors are gathered to rank 0 at save(), which
//    writes the one file in the background.
//  - sharded: each rank that holds something to write (its stage's tensors
//    when it is the stage's writing replica, its error-feedback residuals)
//    writes its shard in the background; once every rank agrees its shard
//    is there, rank 0 writes the manifest and `latest`, in the background too.
//  - parallel: every rank's writer thread takes part in one collective
//    parallel HDF5 write of the whole file (each writes its own tensors);
//    rank 0's then publishes it.
//  - per_site: the same within each site, into the site's shard; then one
//    rank per view of the folder (rank 0 on a shared file system, one per
//    site otherwise) writes the manifest and `latest`.
// The single and sharded forms' writer threads never call MPI; the parallel
// forms' do, on a communicator of their own (MPI_THREAD_MULTIPLE). Every
// exchange on the training thread has the deadline.
class MpiCheckpointSink : public CheckpointSink {
 public:
  MpiCheckpointSink(std::string dir, int keep, CheckpointForm form, CheckpointDeadlines deadlines, MPI_Comm job_comm,
                    std::vector<int> job_ranks, const CheckpointFolderView& view,
                    const std::vector<std::string>& site_of_position)
      : dir_(std::move(dir)), keep_(keep), form_(form), deadline_s_(deadlines.network_s),
        write_deadline_s_(deadlines.write_s), comm_(job_comm),
        job_ranks_(std::move(job_ranks)) {
    GT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    int position = 0;
    GT_MPI_CHECK(MPI_Comm_rank(comm_, &position));
    leads_ = position == 0;
    publishes_ = leads_;
    MPI_Comm io = MPI_COMM_NULL;
    if (form_ == CheckpointForm::parallel) GT_MPI_CHECK(MPI_Comm_dup(comm_, &io));
    if (form_ == CheckpointForm::per_site) {
      // Sites numbered by their first rank; each writes its shard over a
      // communicator of its ranks, led by that first rank.
      const SiteGroups sites = group_by_site(site_of_position);
      const int my_site = sites.site_of_member[static_cast<std::size_t>(position)];
      for (std::size_t k = 0; k < sites.names.size(); ++k) {
        site_shards_.push_back(io::site_shard_name(static_cast<int>(k), sites.names[k]));
        // The shards this rank's view of the folder holds (all of them on a shared file system).
        if (std::find(view.visible.begin(), view.visible.end(), sites.first_member[k]) != view.visible.end()) {
          present_shards_.push_back(site_shards_.back());
        }
      }
      my_shard_ = site_shards_[static_cast<std::size_t>(my_site)];
      // One publisher per view of the folder: its lowest rank.
      publishes_ = !view.visible.empty() && *std::min_element(view.visible.begin(), view.visible.end()) == position;
      GT_MPI_CHECK(MPI_Comm_split(comm_, my_site, position, &io));
    }
    io_comm_ = Communicator(io);
  }

  void save(io::Checkpoint metadata, std::vector<io::CheckpointTensor> tensors) override {
    const std::int64_t step = metadata.completed_steps;
    pending_ = (std::filesystem::path(dir_) / io::step_name(step, writes_folder(form_))).string();
    sent_bytes_ = 0;
    loan_ = nullptr;  // the gathered form copies what it sends; the others lend their tensors to the writer
    switch (form_) {
      case CheckpointForm::sharded: save_shard(std::move(metadata), std::move(tensors)); break;
      case CheckpointForm::parallel:
      case CheckpointForm::per_site: save_collectively(std::move(metadata), std::move(tensors)); break;
      default: save_gathered(std::move(metadata), std::move(tensors)); break;
    }
  }

  bool writing() const override { return worker_.busy(); }

  // Until the writer has handed every tensor to the file, not until the
  // file is on disk: the fsync, the collective close and `latest` go on
  // while the optimizer steps.
  void await_local_write() override {
    if (loan_ && !loan_->wait_for(write_deadline_s_)) stuck();
  }

  bool in_flight() const override { return !pending_.empty(); }

  std::int64_t sent_bytes() const override { return sent_bytes_; }
  int sent_to() const override { return sent_bytes_ > 0 ? job_ranks_.front() : -1; }

  // One phase: every rank's part written (single and parallel: the file,
  // then visible); sharded and per_site, a second: the manifest, also
  // written in the background, so that no rank waits for its fsyncs and the
  // pruning.
  std::string advance() override {
    if (pending_.empty()) return "";
    std::string error;
    try {
      if (!worker_.wait_for(write_deadline_s_)) stuck();
    } catch (const std::exception& e) {
      error = std::string("checkpoint not written: ") + e.what();
    }
    if (!writes_folder(form_) || manifest_queued_) {
      settle(error, writes_folder(form_) ? "waiting for the checkpoint's manifest to be written"
                                         : "waiting for the checkpoint to be written");
      manifest_queued_ = false;
      return std::exchange(pending_, "");
    }
    settle(error, "waiting for every rank to write its part of the checkpoint");
    if (form_ == CheckpointForm::per_site) {
      if (publishes_) queue_manifest(site_shards_, present_shards_);
    } else {
      const std::vector<int> wrote =
          gather_flags(wrote_ ? 1 : 0, deadline_s_, "listing the checkpoint's shards", comm_);
      std::vector<std::string> shards;
      for (std::size_t r = 0; r < wrote.size(); ++r) {
        if (wrote[r]) shards.push_back(io::shard_name(job_ranks_[r]));
      }
      if (publishes_) queue_manifest(shards, shards);
    }
    manifest_queued_ = true;
    return "";
  }

 private:
  // The writer thread cannot be stopped where it hangs: the job ends here.
  [[noreturn]] void stuck() const {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", write_deadline_s_);
    abort_all("checkpoint " + pending_ + " not written within checkpoint.deadline_s = " + seconds +
              " s (a stuck file system, or this rank's writer waiting in a collective write for another rank's); "
              "resume from the last complete one, `latest`");
  }

  // Every rank learns whether one failed; the lowest failing one prints.
  void settle(const std::string& error, const std::string& what) {
    if (const int code = agree_on_failure(error, kExitRunError, deadline_s_, what, comm_)) {
      pending_.clear();
      manifest_queued_ = false;
      throw ReportedFailure(code);
    }
  }

  void save_gathered(io::Checkpoint metadata, std::vector<io::CheckpointTensor> tensors) {
    const std::vector<std::uint8_t> mine = io::serialize_tensors(tensors);
    const std::vector<std::uint8_t> my_residuals = io::serialize_tensors(metadata.residuals);
    if (!leads_) sent_bytes_ = static_cast<std::int64_t>(mine.size() + my_residuals.size());
    const std::vector<std::vector<std::uint8_t>> parts =
        gather_bytes(comm_, mine, 0, deadline_s_, "gathering the checkpoint");
    tensors.clear();
    const std::vector<std::vector<std::uint8_t>> residual_parts =
        gather_bytes(comm_, my_residuals, 0, deadline_s_, "gathering the error-feedback residuals");
    if (parts.empty()) return;  // not the leading rank
    try {
      for (const std::vector<std::uint8_t>& part : parts) {
        for (io::CheckpointTensor& t : io::deserialize_tensors(part)) metadata.tensors.push_back(std::move(t));
      }
      metadata.residuals.clear();  // rank 0's own come back with everyone's
      for (const std::vector<std::uint8_t>& part : residual_parts) {
        for (io::CheckpointTensor& t : io::deserialize_tensors(part)) metadata.residuals.push_back(std::move(t));
      }
    } catch (const std::exception& e) {
      abort_all(std::string("checkpoint not written: ") + e.what());
    }
    auto snapshot = std::make_shared<const io::Checkpoint>(std::move(metadata));
    worker_.start([snapshot, dir = dir_, keep = keep_] { io::save_checkpoint(dir, *snapshot, keep); });
  }

  // The manifest's attributes on a publishing rank, and the removal of one
  // of this step left by an earlier run (killed before `latest` named it),
  // which must not describe the shards written now.
  void prepare_manifest(const io::Checkpoint& metadata) {
    if (!publishes_) return;
    manifest_ = metadata;
    manifest_.tensors.clear();
    manifest_.residuals.clear();
    std::error_code ignored;
    std::filesystem::remove(std::filesystem::path(pending_) / "manifest.h5", ignored);
  }

  void save_shard(io::Checkpoint metadata, std::vector<io::CheckpointTensor> tensors) {
    prepare_manifest(metadata);
    metadata.tensors = std::move(tensors);
    wrote_ = !metadata.tensors.empty() || !metadata.residuals.empty();
    if (!wrote_) return;
    auto snapshot = std::make_shared<const io::Checkpoint>(std::move(metadata));
    loan_ = std::make_shared<Loan>();
    worker_.start(lend(loan_, [snapshot, dir = dir_, rank = rank_, loan = loan_] {
      io::write_checkpoint_shard(dir, *snapshot, rank, [&] { loan->give_back(); });
    }));
  }

  // Every rank's writer thread joins the collective write (also with
  // nothing of its own to write: HDF5's metadata calls are collective).
  void save_collectively(io::Checkpoint metadata, std::vector<io::CheckpointTensor> tensors) {
    const bool whole = form_ == CheckpointForm::parallel;
    if (!whole) prepare_manifest(metadata);
    metadata.tensors = std::move(tensors);
    const std::string path = whole ? pending_ : (std::filesystem::path(pending_) / my_shard_).string();
    auto snapshot = std::make_shared<const io::Checkpoint>(std::move(metadata));
    const int comm = MPI_Comm_c2f(io_comm_.get());
    loan_ = std::make_shared<Loan>();
    worker_.start(lend(loan_, [snapshot, path, comm, whole, publish = whole && leads_, dir = dir_, keep = keep_,
                               loan = loan_] {
      io::write_checkpoint_collectively(comm, path, *snapshot,
                                        whole ? io::CollectiveFile::whole : io::CollectiveFile::shard,
                                        [&] { loan->give_back(); });
      if (publish) io::publish_checkpoint(dir, std::filesystem::path(path).filename().string(), keep);
    }));
  }

  // Once every shard is written: the manifest, then `latest`, in the background.
  void queue_manifest(std::vector<std::string> shards, std::vector<std::string> present) {
    auto metadata = std::make_shared<const io::Checkpoint>(std::move(manifest_));
    worker_.start([metadata, shards = std::move(shards), present = std::move(present), dir = dir_, keep = keep_] {
      io::publish_sharded_checkpoint(dir, *metadata, shards, keep, present);
    });
  }

  std::string dir_;
  int keep_;
  CheckpointForm form_;
  double deadline_s_;        // network.deadline_s
  double write_deadline_s_;  // checkpoint.deadline_s
  MPI_Comm comm_;
  std::vector<int> job_ranks_;  // world rank of each rank of comm_
  bool leads_ = false;          // comm_'s first rank: gathers; in the parallel form, publishes
  bool publishes_ = false;      // writes the manifest and `latest` (in its view of the folder)
  int rank_ = 0;                // world rank: names this rank's shard
  std::string pending_;     // the path of the checkpoint in flight ("" when none)
  bool wrote_ = false;      // sharded: this rank writes a shard of it
  bool manifest_queued_ = false;  // every shard is written; the manifest is being written
  io::Checkpoint manifest_;  // on a publishing rank: the manifest's attributes
  std::int64_t sent_bytes_ = 0;  // to rank 0 at the last save (the single form's gather)
  std::vector<std::string> site_shards_, present_shards_;  // per_site: every site's shard; those in this view
  std::string my_shard_;     // per_site: this rank's site's
  std::shared_ptr<Loan> loan_;  // the tensors the write in flight reads, until it has read them
  Communicator io_comm_;     // parallel forms: the writer thread's own
  BackgroundWorker worker_;  // last: destroyed (waiting for its jobs) first, before io_comm_ is freed
};

}  // namespace

std::unique_ptr<CheckpointSink> make_mpi_checkpoint_sink(const std::string& dir, int keep, CheckpointForm form,
                                                         CheckpointDeadlines deadlines, MPI_Comm job_comm,
                                                         const std::vector<int>& job_ranks,
                                                         const CheckpointFolderView& view,
                                                         const std::vector<std::string>& site_of_position) {
  return std::make_unique<MpiCheckpointSink>(dir, keep, form, deadlines, job_comm, job_ranks, view,
                                             site_of_position);
}

}  // namespace geotrain::runtime
