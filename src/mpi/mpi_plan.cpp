#include "geotrain/mpi/mpi_plan.hpp"

#include <algorithm>
#include <climits>
#include <span>
#include <sstream>
#include <stdexcept>

#include "geotrain/common/errors.hpp"
#include "geotrain/plan/plan_codec.hpp"
#include "geotrain/mpi/mpi_check.hpp"
#include "geotrain/runtime/site_groups.hpp"

namespace geotrain::runtime {

std::vector<std::uint8_t> broadcast_bytes(MPI_Comm comm, const std::vector<std::uint8_t>& bytes, int root,
                                          double deadline_s, const std::string& what) {
  int rank = 0;
  GT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  std::uint64_t size = rank == root ? bytes.size() : 0;
  MPI_Request request;
  GT_MPI_CHECK(MPI_Ibcast(&size, 1, MPI_UINT64_T, root, comm, &request));
  wait_collective_or_abort({&request, 1}, comm, root, deadline_s, what + " (size)");
  if (size > (std::uint64_t{1} << 30)) {
    abort_all(what + ": announced size " + std::to_string(size) + " bytes is over 1 GiB; rejected");
  }
  std::vector<std::uint8_t> out(rank == root ? bytes : std::vector<std::uint8_t>(size));
  GT_MPI_CHECK(MPI_Ibcast(out.data(), static_cast<int>(size), MPI_BYTE, root, comm, &request));
  wait_collective_or_abort({&request, 1}, comm, root, deadline_s, what);
  return out;
}

std::vector<std::vector<std::uint8_t>> gather_bytes(MPI_Comm comm, const std::vector<std::uint8_t>& bytes, int root,
                                                    double deadline_s, const std::string& what) {
  int rank = 0, size = 1;
  GT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  GT_MPI_CHECK(MPI_Comm_size(comm, &size));
  const bool is_root = rank == root;
  if (bytes.size() > static_cast<std::size_t>(INT32_MAX)) abort_all(what + ": this rank's part is over 2 GiB");
  int my_size = static_cast<int>(bytes.size());
  std::vector<int> sizes(is_root ? size : 0), offsets(is_root ? size : 0);
  MPI_Request request;
  GT_MPI_CHECK(MPI_Igather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, comm, &request));
  wait_collective_or_abort({&request, 1}, comm, root, deadline_s, what + " (sizes)");
  std::vector<std::uint8_t> all;
  if (is_root) {
    long long total = 0;
    for (int r = 0; r < size; ++r) offsets[r] = static_cast<int>(total), total += sizes[r];
    if (total > INT32_MAX) abort_all(what + ": over 2 GiB in all, more than one gather carries");
    all.resize(static_cast<std::size_t>(total));
  }
  GT_MPI_CHECK(MPI_Igatherv(bytes.data(), my_size, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, root,
                            comm, &request));
  wait_collective_or_abort({&request, 1}, comm, root, deadline_s, what);
  std::vector<std::vector<std::uint8_t>> parts;
  for (int r = 0; is_root && r < size; ++r) parts.emplace_back(all.begin() + offsets[r], all.begin() + offsets[r] + sizes[r]);
  return parts;
}

bool ranks_agree(MPI_Comm comm, std::uint64_t value, double deadline_s, const std::string& what) {
  std::uint64_t low = 0, high = 0;
  MPI_Request requests[2];
  GT_MPI_CHECK(MPI_Iallreduce(&value, &low, 1, MPI_UINT64_T, MPI_MIN, comm, &requests[0]));
  GT_MPI_CHECK(MPI_Iallreduce(&value, &high, 1, MPI_UINT64_T, MPI_MAX, comm, &requests[1]));
  wait_collective_or_abort(requests, comm, -1, deadline_s, what);
  return low == high;
}

plan::Plan broadcast_plan(MPI_Comm comm, const plan::Plan& plan_on_root, double deadline_s) {
  int rank = 0, size = 1;
  GT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  GT_MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<std::uint8_t> bytes;
  if (rank == 0) {
    try {
      bytes = plan::encode_plan(plan_on_root);
    } catch (const InputError& e) {
      abort_all(std::string("cannot send the plan: ") + e.what());
    }
  }
  bytes = broadcast_bytes(comm, bytes, 0, deadline_s, "receiving the plan from rank 0");
  plan::Plan plan;
  try {
    plan = plan::decode_plan(bytes, size);
  } catch (const InputError& e) {
    abort_all(std::string("plan from rank 0 rejected: ") + e.what());
  }
  if (!ranks_agree(comm, plan.hash(), deadline_s, "comparing plan hashes")) {
    abort_all("ranks received different plans (plan hash " + std::to_string(plan.hash()) + " here)");
  }
  return plan;
}

plan::Plan plan_on_root_and_broadcast(MPI_Comm comm, const plan::Network& network_on_root,
                                      const plan::Workload& workload, plan::Placement placement,
                                      const plan::SearchOptions& options, double deadline_s) {
  int rank = 0;
  GT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  plan::Plan planned;
  if (rank == 0) {
    try {
      planned = plan::make_placement(plan::CostModel(network_on_root, workload), placement, options).plan;
    } catch (const std::exception& e) {
      abort_all(std::string("planning failed: ") + e.what());
    }
  }
  return broadcast_plan(comm, planned, deadline_s);
}

Communicator::~Communicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
  }
  return *this;
}

namespace {

// Where this rank sits in `plan`: its unit's stage and replica and its
// place in the unit (idle when the plan leaves it out), and every rank the
// plan uses.
void place_rank(const plan::Plan& plan, Topology& t) {
  t.pipeline_stages = plan.pipeline_stages;
  t.data_parallel = plan.data_parallel;
  t.tensor_parallel = plan.tensor_parallel;
  t.idle = true;
  for (int s = 0; s < plan.pipeline_stages; ++s) {
    for (int r = 0; r < plan.data_parallel; ++r) {
      const std::vector<int> unit = plan.ranks_of_unit(plan.stages[s][r]);
      for (std::size_t j = 0; j < unit.size(); ++j) {
        t.job_ranks.push_back(unit[j]);
        if (unit[j] != t.rank) continue;
        t.stage = s, t.replica = r, t.tensor_rank = static_cast<int>(j), t.idle = false;
        t.tensor_ranks = unit;
      }
    }
  }
  std::sort(t.job_ranks.begin(), t.job_ranks.end());
}

// A training rank's groups, split from `job`: its stage's replicas (the
// data-parallel sum), its replica's stages (the pipeline, and the tied
// embedding's two ends) and its unit's slices (tensor parallelism). Every
// group but the last joins the ranks that hold the same slice of the model.
void split_training_groups(MPI_Comm job, const plan::Plan& plan, Topology& t) {
  // The rank holding this rank's slice of the model in unit (s, r).
  const auto rank_at = [&](int s, int r) {
    return plan.ranks_of_unit(plan.stages[s][r])[static_cast<std::size_t>(t.tensor_rank)];
  };
  const int slices = t.tensor_parallel;
  for (int r = 0; r < plan.data_parallel; ++r) t.dp_ranks.push_back(rank_at(t.stage, r));
  for (int s = 0; s < plan.pipeline_stages; ++s) t.pipeline_ranks.push_back(rank_at(s, t.replica));
  if (t.stage > 0) t.previous_rank = rank_at(t.stage - 1, t.replica);
  if (t.stage + 1 < plan.pipeline_stages) t.next_rank = rank_at(t.stage + 1, t.replica);
  MPI_Comm dp = MPI_COMM_NULL;
  GT_MPI_CHECK(MPI_Comm_split(job, t.stage * slices + t.tensor_rank, t.replica, &dp));
  t.dp_comm = Communicator(dp);
  int dp_rank = -1, dp_size = 0;
  GT_MPI_CHECK(MPI_Comm_rank(dp, &dp_rank));
  GT_MPI_CHECK(MPI_Comm_size(dp, &dp_size));
  if (dp_rank != t.replica || dp_size != plan.data_parallel) {
    abort_all("data-parallel communicator of stage " + std::to_string(t.stage) + " has rank " +
              std::to_string(dp_rank) + " of " + std::to_string(dp_size) + ", expected replica " +
              std::to_string(t.replica) + " of " + std::to_string(plan.data_parallel));
  }
  MPI_Comm pipe = MPI_COMM_NULL, tied = MPI_COMM_NULL;
  GT_MPI_CHECK(MPI_Comm_split(job, t.replica * slices + t.tensor_rank, t.stage, &pipe));
  t.pipeline_comm = Communicator(pipe);
  const bool holds_embedding = t.pipeline_stages > 1 && (t.stage == 0 || t.stage == t.pipeline_stages - 1);
  GT_MPI_CHECK(MPI_Comm_split(job, holds_embedding ? t.replica * slices + t.tensor_rank : MPI_UNDEFINED, t.stage,
                              &tied));
  t.tied_comm = Communicator(tied);
  MPI_Comm tensor = MPI_COMM_NULL;
  GT_MPI_CHECK(MPI_Comm_split(job, slices > 1 ? t.stage * plan.data_parallel + t.replica : MPI_UNDEFINED,
                              t.tensor_rank, &tensor));
  t.tensor_comm = Communicator(tensor);
}

// The members of this rank's data-parallel group in its own site, split
// from that group; and the hierarchical exchange's lanes: the members at
// the same place in their sites, one per site (sites of unequal sizes: the
// first members only).
void split_site_group(const std::vector<std::string>& site_of_rank, Topology& t) {
  std::vector<std::string> site_of_replica;
  for (int member : t.dp_ranks) site_of_replica.push_back(site_of_rank[member]);
  const SiteGroups sites = group_by_site(site_of_replica);
  t.site_of_replica = sites.site_of_member;
  const std::vector<int> mine = sites.members_with(t.replica);
  for (int replica : mine) t.site_ranks.push_back(t.dp_ranks[replica]);
  t.site_place = static_cast<int>(std::find(mine.begin(), mine.end(), t.replica) - mine.begin());
  // Colour: the group's first member in this rank's site (the same for all of them).
  MPI_Comm site = MPI_COMM_NULL;
  GT_MPI_CHECK(MPI_Comm_split(t.dp_comm.get(), t.site_ranks.front(), t.replica, &site));
  t.site_comm = Communicator(site);

  const std::size_t per_site = sites.members_with(0).size();
  bool even = true;
  for (int first : sites.first_member) even = even && sites.members_with(first).size() == per_site;
  t.lanes = even ? static_cast<int>(per_site) : 1;
  const bool owner = t.site_place < t.lanes;
  for (std::size_t s = 0; owner && s < sites.names.size(); ++s) {
    t.lane_ranks.push_back(t.dp_ranks[sites.members_with(sites.first_member[s])[t.site_place]]);
  }
  MPI_Comm lane = MPI_COMM_NULL;
  GT_MPI_CHECK(MPI_Comm_split(t.dp_comm.get(), owner ? t.site_place : MPI_UNDEFINED,
                              sites.site_of_member[t.replica], &lane));
  t.lane_comm = Communicator(lane);
}

}  // namespace

Topology make_topology(MPI_Comm world, const plan::Plan& plan, double deadline_s,
                       const std::vector<std::string>& site_of_rank) {
  Topology t;
  int size = 1;
  GT_MPI_CHECK(MPI_Comm_rank(world, &t.rank));
  GT_MPI_CHECK(MPI_Comm_size(world, &size));
  // The plan may come from anywhere: check it as the decoder does.
  try {
    plan::decode_plan(plan::encode_plan(plan), size);
  } catch (const InputError& e) {
    abort_all(std::string("make_topology: ") + e.what());
  }
  place_rank(plan, t);

  MPI_Request request;
  GT_MPI_CHECK(MPI_Ibarrier(world, &request));
  wait_collective_or_abort({&request, 1}, world, -1, deadline_s, "building the communicators");
  MPI_Comm job = MPI_COMM_NULL;
  GT_MPI_CHECK(MPI_Comm_split(world, t.idle ? MPI_UNDEFINED : 0, t.rank, &job));
  t.job_comm = Communicator(job);
  // Activations go by world rank (as the plan names ranks), on a duplicate of `world`.
  MPI_Comm links = MPI_COMM_NULL;
  GT_MPI_CHECK(MPI_Comm_dup(world, &links));
  t.pipeline_links = Communicator(links);
  if (t.idle) return t;  // the other communicators are split from job_comm
  split_training_groups(job, plan, t);
  if (static_cast<int>(site_of_rank.size()) == size) split_site_group(site_of_rank, t);
  for (const Communicator* c : {&t.job_comm, &t.dp_comm, &t.pipeline_comm, &t.tied_comm, &t.pipeline_links,
                                &t.site_comm, &t.lane_comm, &t.tensor_comm}) {
    if (c->get() != MPI_COMM_NULL) GT_MPI_CHECK(MPI_Comm_set_errhandler(c->get(), MPI_ERRORS_RETURN));
  }
  return t;
}

std::string describe(const Topology& t) {
  std::ostringstream out;
  out << "rank " << t.rank << ": stage " << t.stage << " of " << t.pipeline_stages << ", replica " << t.replica
      << " of " << t.data_parallel;
  if (t.tensor_parallel > 1) {
    out << ", tensor rank " << t.tensor_rank << " of [";
    for (std::size_t i = 0; i < t.tensor_ranks.size(); ++i) out << (i ? " " : "") << t.tensor_ranks[i];
    out << "]";
  }
  out << ", data-parallel group [";
  for (std::size_t i = 0; i < t.dp_ranks.size(); ++i) out << (i ? " " : "") << t.dp_ranks[i];
  out << "], previous ";
  if (t.previous_rank >= 0) out << t.previous_rank; else out << "-";
  out << ", next ";
  if (t.next_rank >= 0) out << t.next_rank; else out << "-";
  return out.str();
}

std::vector<int> host_of_rank(MPI_Comm world, double deadline_s) {
  int rank = 0, size = 1;
  GT_MPI_CHECK(MPI_Comm_rank(world, &rank));
  GT_MPI_CHECK(MPI_Comm_size(world, &size));
  MPI_Comm host = MPI_COMM_NULL;
  GT_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host));
  int host_id = rank;
  MPI_Request request;
  GT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &host_id, 1, MPI_INT, MPI_MIN, host, &request));
  wait_collective_or_abort({&request, 1}, host, -1, deadline_s, "naming the hosts");
  MPI_Comm_free(&host);
  std::vector<int> host_of(static_cast<std::size_t>(size));
  GT_MPI_CHECK(MPI_Iallgather(&host_id, 1, MPI_INT, host_of.data(), 1, MPI_INT, world, &request));
  wait_collective_or_abort({&request, 1}, world, -1, deadline_s, "gathering the hosts");
  return host_of;
}

std::string consecutive_tensor_groups(MPI_Comm world, int t, double deadline_s,
                                      std::vector<std::vector<int>>& groups) {
  int size = 1;
  GT_MPI_CHECK(MPI_Comm_size(world, &size));
  groups.clear();
  if (t <= 1) return "";
  const std::vector<int> host_of = host_of_rank(world, deadline_s);
  if (size % t != 0) {
    return "pipeline.tensor_parallel: " + std::to_string(t) + " does not divide the " + std::to_string(size) +
           " ranks of this job";
  }
  for (int first = 0; first < size; first += t) {
    std::vector<int> group;
    for (int j = 0; j < t; ++j) {
      group.push_back(first + j);
      if (host_of[static_cast<std::size_t>(first + j)] != host_of[static_cast<std::size_t>(first)]) {
        return "pipeline.tensor_parallel: ranks " + std::to_string(first) + " and " + std::to_string(first + j) +
               " would share a tensor-parallel group but run on different hosts (place " + std::to_string(t) +
               " consecutive ranks per host, e.g. mpirun --map-by ppr:" + std::to_string(t) + ":node)";
      }
    }
    groups.push_back(std::move(group));
  }
  return "";
}

}  // namespace geotrain::runtime
