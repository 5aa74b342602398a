// Rank 0's plan, delivered to every rank and checked there; the
// communicators the plan implies.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "geotrain/plan/placement.hpp"
#include "geotrain/plan/plan.hpp"
#include "geotrain/plan/search.hpp"

namespace geotrain::runtime {

// Collective: `bytes` of `root` (ignored elsewhere) to every rank, size first
// (MPI_Ibcast, each wait with the deadline). Sizes over 1 GiB are rejected.
std::vector<std::uint8_t> broadcast_bytes(MPI_Comm comm, const std::vector<std::uint8_t>& bytes, int root,
                                          double deadline_s, const std::string& what);

// Collective: every rank's `bytes` to `root`, in rank order (sizes, then
// MPI_Igatherv; each wait with the deadline); empty elsewhere. The total
// must stay under 2 GiB (one gather's limit); over it, every rank aborts.
std::vector<std::vector<std::uint8_t>> gather_bytes(MPI_Comm comm, const std::vector<std::uint8_t>& bytes, int root,
                                                    double deadline_s, const std::string& what);

// Collective: true on every rank when all ranks passed the same value
// (MPI_Iallreduce of MIN and MAX), false on every rank otherwise.
bool ranks_agree(MPI_Comm comm, std::uint64_t value, double deadline_s, const std::string& what);

// Collective: rank 0 passes its plan (others pass anything, e.g. Plan{}).
// Rank 0 encodes it (plan/plan_codec.hpp), broadcasts the bytes; every rank
// decodes and validates them (pp * dp at most the communicator size: a layout
// may leave ranks idle) and
// the ranks agree on plan.hash(). A rejected message or a disagreement
// aborts every rank with a message saying why.
plan::Plan broadcast_plan(MPI_Comm comm, const plan::Plan& plan_on_root, double deadline_s);

// Collective: rank 0 places the devices (plan::make_placement: the planner,
// or a baseline) on its network and `workload` (e.g.
// plan::workload_from_model), then broadcast_plan. Other ranks'
// `network_on_root` is ignored. A network or workload the placement rejects
// aborts every rank with the reason.
plan::Plan plan_on_root_and_broadcast(MPI_Comm comm, const plan::Network& network_on_root,
                                      const plan::Workload& workload, plan::Placement placement,
                                      const plan::SearchOptions& options, double deadline_s);

// An owned communicator, freed on destruction.
class Communicator {
 public:
  Communicator() = default;
  explicit Communicator(MPI_Comm comm) : comm_(comm) {}
  ~Communicator();
  Communicator(Communicator&& other) noexcept : comm_(std::exchange(other.comm_, MPI_COMM_NULL)) {}
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// This rank's place in the plan. Device d is rank d of the communicator the
// plan was made for (the probe's numbering); under tensor parallelism the
// plan's stages name units of t ranks (plan.tensor_groups).
struct Topology {
  int rank = 0;
  // A layout may leave ranks out (pp x dp < ranks): those are idle, in none
  // of the communicators below, and leave the job.
  bool idle = false;
  std::vector<int> job_ranks;                 // the ranks in the plan, ascending
  Communicator job_comm;                      // those ranks; rank in it == position in job_ranks
  int stage = 0, replica = 0;                 // this rank's unit == plan.stages[stage][replica]
  // Tensor parallelism (plan.tensor_parallel = t > 1): the unit's t ranks
  // (one node) split every layer; this rank is tensor_ranks[tensor_rank].
  // Every group below then joins the ranks of one tensor rank (the same
  // slice of the model); t = 1: tensor_ranks = {rank}.
  int tensor_parallel = 1, tensor_rank = 0;
  std::vector<int> tensor_ranks;
  Communicator tensor_comm;                   // tensor_ranks (t > 1); rank in it == tensor_rank
  int pipeline_stages = 1, data_parallel = 1;
  int previous_rank = -1;                     // stages[stage-1][replica]; -1 on the first stage
  int next_rank = -1;                         // stages[stage+1][replica]; -1 on the last stage
  std::vector<int> dp_ranks;                  // stages[stage][*]: the data-parallel group, by replica
  std::vector<int> pipeline_ranks;            // stages[*][replica]: this replica's pipeline, by stage
  Communicator dp_comm;                       // those ranks; rank in it == replica
  Communicator pipeline_comm;                 // stages[*][replica]; rank in it == stage
  Communicator tied_comm;                     // this replica's first and last stage (pp > 1, those two only)
  std::vector<int> site_ranks;                // dp_ranks in this rank's site (empty: sites not given)
  Communicator site_comm;                     // those ranks; rank in it == position in site_ranks
  // The data-parallel group by site (sites given), for the hierarchical
  // exchange (job/hierarchical_exchange.hpp) and the order of every sum:
  std::vector<int> site_of_replica;           // per replica: its site, numbered in order of first replica
  int lanes = 0;                              // stripes: the replicas per site where all sites have as many, else 1
  int site_place = 0;                         // this rank's position in site_ranks; owns a stripe if < lanes
  std::vector<int> lane_ranks;                // the owners of this rank's stripe, one per site, by site
  Communicator lane_comm;                     // those ranks (null where this rank owns no stripe)
  Communicator pipeline_links;                // a duplicate of the world communicator for activations
};

// Collective over `world`: validates the plan against the communicator's
// size, splits one data-parallel communicator per stage
// (MPI_Comm_split(color = stage, key = replica)), one pipeline communicator
// per replica and the tied-embedding pairs, duplicates `world` for the
// point-to-point traffic (so its tags never meet a library's), and finds the
// pipeline neighbours, and one communicator of the ranks the plan uses (the
// others come back idle). A barrier with the deadline runs first, so a dead rank is
// named instead of hanging the split. With `site_of_rank`, also each data-parallel
// group's members in one site (local steps' outer.sync_within_site) and its
// hierarchical exchange's lanes.
Topology make_topology(MPI_Comm world, const plan::Plan& plan, double deadline_s,
                       const std::vector<std::string>& site_of_rank = {});

// One line: "rank 3: stage 1 of 2, replica 1 of 2, data-parallel group [1 3], previous 2, next -".
std::string describe(const Topology& topology);

// Collective over `world`: each rank's host, named by its lowest rank there
// (MPI_COMM_TYPE_SHARED), on every rank.
std::vector<int> host_of_rank(MPI_Comm world, double deadline_s);

// Collective over `world`: units of `t` consecutive ranks (0..t-1, t..2t-1,
// ...), each of which must be on one host (MPI_COMM_TYPE_SHARED); "" or a
// one-line error naming the ranks and hosts that break it.
std::string consecutive_tensor_groups(MPI_Comm world, int t, double deadline_s,
                                      std::vector<std::vector<int>>& groups);

}  // namespace geotrain::runtime
