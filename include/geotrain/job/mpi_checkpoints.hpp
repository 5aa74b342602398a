// Checkpoints under MPI: agreeing on failures, finding out what
// checkpoint.dir is to the ranks (one shared folder, or one per site), and
// the sink the trainer hands each rank's part to (checkpoint.form).
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "geotrain/runtime/checkpointing.hpp"

namespace geotrain::runtime {

// Collective: returns 0 when no rank failed; otherwise the lowest failing
// rank prints its message and every rank returns that rank's exit code.
// `what` names the wait for the deadline's message.
int agree_on_failure(const std::string& error, int code, double deadline_s,
                     const std::string& what = "checking that every rank read its inputs",
                     MPI_Comm comm = MPI_COMM_WORLD);

// Every rank's `flag` in `comm`, on every rank (MPI_Iallgather, with the deadline).
std::vector<int> gather_flags(int flag, double deadline_s, const std::string& what, MPI_Comm comm);

// What checkpoint.dir is to the ranks of `job_comm` (collective): each rank
// creates the folder and a marker file in it, then looks for the others'.
struct CheckpointFolderView {
  std::vector<int> visible;  // positions in job_comm whose markers this rank sees (itself included)
  CheckpointPremises premises;  // shared_folder, sites_share_folder, folder_note, ranks
};
// `site_of_position`: each job rank's site ("" everywhere: one site).
CheckpointFolderView probe_checkpoint_folder(const std::string& dir, MPI_Comm job_comm,
                                             const std::vector<std::string>& site_of_position, double deadline_s);

// Collective over MPI_COMM_WORLD, at start-up before any rank reads the
// checkpoint that checkpoint.resume (`resume`, in `dir`) names: where that
// is a folder of shards (sharded, per_site) and some ranks' folders lack
// shards that others' hold (sites that share no file system), one rank of
// each folder receives each shard it lacks from a rank that holds it and
// writes it there. Returns 0, or the exit code every rank agreed on after
// one rank printed why: 2 when the ranks would resume from different steps
// or a shard is missing everywhere (named), 1 when a copy failed.
int fetch_missing_shards(const std::string& dir, const std::string& resume, double deadline_s);

// network.deadline_s for the exchanges between ranks; checkpoint.deadline_s
// for the training thread's waits for its writer thread (past it every rank
// stops naming the checkpoint: a stuck file system or collective write).
struct CheckpointDeadlines {
  double network_s = 0;
  double write_s = 0;
};

// The sink for `form` (already resolved) over the training ranks `job_comm`
// (world rank of each: job_ranks). Idle ranks take no part.
std::unique_ptr<CheckpointSink> make_mpi_checkpoint_sink(const std::string& dir, int keep, CheckpointForm form,
                                                         CheckpointDeadlines deadlines, MPI_Comm job_comm,
                                                         const std::vector<int>& job_ranks,
                                                         const CheckpointFolderView& view,
                                                         const std::vector<std::string>& site_of_position);

}  // namespace geotrain::runtime
