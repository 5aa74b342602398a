// Plan broadcast (identical on every rank; a corrupted message is rejected)
// and the communicators built from a shuffled plan.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/plan/plan_codec.hpp"
#include "geotrain/plan/search.hpp"
#include "geotrain/mpi/mpi_check.hpp"
#include "geotrain/mpi/mpi_plan.hpp"
#include "geotrain/job/mpi_training.hpp"

namespace {

using namespace geotrain;

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Rank 0 plans for a random network of the job's size.
plan::Plan plan_on_rank0(int pp, int dp) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> latency(1e-3, 50e-3), bandwidth(0.5e8, 2e9);
  plan::Network net;
  net.device_count = pp * dp;
  for (int i = 0; i < pp * dp * pp * dp; ++i) {
    net.latency_s.push_back(latency(rng));
    net.bandwidth_bytes_per_s.push_back(bandwidth(rng));
  }
  plan::Workload w;
  w.pipeline_stages = pp;
  w.data_parallel = dp;
  w.c_dp_bytes = 1e9;
  w.c_pp_bytes = 1e8;
  plan::SearchOptions options;
  options.candidates = 50;
  return plan::search_plan(plan::CostModel(net, w), options).plan;
}

// The plan whose stage s is held by the units stages[s], one per replica.
plan::Plan plan_with_stages(std::vector<std::vector<int>> stages) {
  plan::Plan p;
  p.pipeline_stages = static_cast<int>(stages.size());
  p.data_parallel = static_cast<int>(stages.front().size());
  p.stages = std::move(stages);
  return p;
}

TEST(PlanBroadcast, EveryRankGetsTheIdenticalPlan) {
  const int n = world_size();
  ASSERT_EQ(n % 2, 0) << "run with an even number of ranks";
  const int rank = runtime::world_rank();
  const plan::Plan mine = rank == 0 ? plan_on_rank0(2, n / 2) : plan::Plan{};
  const plan::Plan got = runtime::broadcast_plan(MPI_COMM_WORLD, mine, 20);
  EXPECT_EQ(got.pipeline_stages, 2);
  EXPECT_EQ(got.data_parallel, n / 2);
  // Compare with rank 0's hash, sent separately.
  std::uint64_t root_hash = rank == 0 ? mine.hash() : 0;
  MPI_Bcast(&root_hash, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  EXPECT_EQ(got.hash(), root_hash);
  if (rank == 0) {
    EXPECT_EQ(got.stages, mine.stages);
  }
}

TEST(PlanBroadcast, CorruptedMessageIsRejectedOnEveryRank) {
  const int n = world_size();
  const int rank = runtime::world_rank();
  std::vector<std::uint8_t> bytes;
  if (rank == 0) {
    bytes = plan::encode_plan(plan_on_rank0(2, n / 2));
    bytes[bytes.size() / 2] ^= 0x04;  // one bit flipped "in transit"
  }
  const auto received = runtime::broadcast_bytes(MPI_COMM_WORLD, bytes, 0, 20, "receiving a test message");
  EXPECT_THROW(plan::decode_plan(received, n), InputError);
  // A truncated message too.
  const std::vector<std::uint8_t> cut(received.begin(), received.begin() + received.size() / 2);
  EXPECT_THROW(plan::decode_plan(cut, n), InputError);
}

TEST(PlanBroadcast, DisagreementIsSeenByEveryRank) {
  const int rank = runtime::world_rank();
  EXPECT_TRUE(runtime::ranks_agree(MPI_COMM_WORLD, 77, 20, "test"));
  EXPECT_FALSE(runtime::ranks_agree(MPI_COMM_WORLD, rank == world_size() - 1 ? 78 : 77, 20, "test"));
}

TEST(Topology, ShuffledPlanGivesConsistentCommunicatorsAndChains) {
  const int n = world_size();
  const int rank = runtime::world_rank();
  const int pp = 2, dp = n / 2;
  // The same shuffled placement on every rank (same seed).
  std::vector<int> devices(n);
  for (int i = 0; i < n; ++i) devices[i] = i;
  std::shuffle(devices.begin(), devices.end(), std::mt19937(2024));
  std::vector<std::vector<int>> stages(pp, std::vector<int>(dp));
  for (int s = 0; s < pp; ++s) {
    for (int r = 0; r < dp; ++r) stages[s][r] = devices[s * dp + r];
  }
  const plan::Plan p = plan_with_stages(stages);
  const auto topology = runtime::make_topology(MPI_COMM_WORLD, p, 20);
  std::fprintf(stderr, "%s\n", runtime::describe(topology).c_str());

  EXPECT_EQ(p.stages[topology.stage][topology.replica], rank);
  // Data-parallel communicator: the stage's ranks, ordered by replica.
  MPI_Group world_group, dp_group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Comm_group(topology.dp_comm.get(), &dp_group);
  int dp_size = 0;
  MPI_Group_size(dp_group, &dp_size);
  ASSERT_EQ(dp_size, dp);
  std::vector<int> local(dp), global(dp);
  for (int i = 0; i < dp; ++i) local[i] = i;
  MPI_Group_translate_ranks(dp_group, dp, local.data(), world_group, global.data());
  EXPECT_EQ(global, p.stages[topology.stage]);
  MPI_Group_free(&dp_group);
  MPI_Group_free(&world_group);

  // An all-reduce inside each group sums that stage's ranks.
  int sum = 0;
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, topology.dp_comm.get());
  int expected = 0;
  for (int d : p.stages[topology.stage]) expected += d;
  EXPECT_EQ(sum, expected);

  // Pipeline chains: previous/next agree pairwise across ranks.
  int mine[4] = {topology.stage, topology.replica, topology.previous_rank, topology.next_rank};
  std::vector<int> all(4 * n);
  MPI_Allgather(mine, 4, MPI_INT, all.data(), 4, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < n; ++r) {
    const int stage = all[4 * r], replica = all[4 * r + 1], prev = all[4 * r + 2], next = all[4 * r + 3];
    EXPECT_EQ(prev < 0, stage == 0) << "rank " << r;
    EXPECT_EQ(next < 0, stage == pp - 1) << "rank " << r;
    if (next >= 0) {
      EXPECT_EQ(all[4 * next + 2], r) << "rank " << r << " -> " << next;
      EXPECT_EQ(all[4 * next], stage + 1);
      EXPECT_EQ(all[4 * next + 1], replica);
    }
    if (prev >= 0) {
      EXPECT_EQ(all[4 * prev + 3], r) << "rank " << r << " <- " << prev;
    }
  }
}

// A layout that leaves ranks out (pp x dp < ranks, as the layout search may
// choose): those come back idle and in no communicator; the others form the
// job communicator (by world rank) and their groups as for any plan.
TEST(Topology, RanksLeftOutOfThePlanAreIdle) {
  ASSERT_GE(world_size(), 3) << "run with at least 3 ranks";
  const int rank = runtime::world_rank();
  // Stages 2 -> 0 (one replica): rank 1 and ranks 3.. are idle.
  const plan::Plan p = plan_with_stages({{2}, {0}});
  const auto topology = runtime::make_topology(MPI_COMM_WORLD, p, 20);
  const bool in_plan = rank == 0 || rank == 2;
  EXPECT_EQ(topology.idle, !in_plan);
  EXPECT_EQ(topology.job_ranks, (std::vector<int>{0, 2}));
  if (!in_plan) {
    EXPECT_EQ(topology.job_comm.get(), MPI_COMM_NULL);
    EXPECT_EQ(topology.dp_comm.get(), MPI_COMM_NULL);
    return;
  }
  int job_size = 0, job_rank = -1;
  MPI_Comm_size(topology.job_comm.get(), &job_size);
  MPI_Comm_rank(topology.job_comm.get(), &job_rank);
  EXPECT_EQ(job_size, 2);
  EXPECT_EQ(job_rank, rank == 0 ? 0 : 1);  // ordered by world rank
  EXPECT_EQ(topology.stage, rank == 2 ? 0 : 1);
  EXPECT_EQ(topology.next_rank, rank == 2 ? 0 : -1);
  EXPECT_EQ(topology.previous_rank, rank == 0 ? 2 : -1);
  // Activations travel by world rank: rank 2 sends to rank 0 on the links.
  int value = rank == 2 ? 42 : 0;
  if (rank == 2) MPI_Send(&value, 1, MPI_INT, 0, 7, topology.pipeline_links.get());
  if (rank == 0) MPI_Recv(&value, 1, MPI_INT, 2, 7, topology.pipeline_links.get(), MPI_STATUS_IGNORE);
  EXPECT_EQ(value, 42);
  int sum = 0;
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, topology.job_comm.get());
  EXPECT_EQ(sum, 2);
}

}  // namespace

namespace {

// Two 2-rank units, the second unit first in the pipeline: every
// communicator joins the ranks of one tensor rank, and the unit's group sums.
TEST(Topology, TensorParallelUnitsChainByTensorRank) {
  ASSERT_GE(world_size(), 4) << "run with at least 4 ranks";
  const int rank = runtime::world_rank();
  plan::Plan p = plan_with_stages({{1}, {0}});
  p.tensor_parallel = 2;
  p.tensor_groups = {{2, 3}, {0, 1}};
  const auto topology = runtime::make_topology(MPI_COMM_WORLD, p, 20);
  if (rank >= 4) {
    EXPECT_TRUE(topology.idle);
    return;
  }
  EXPECT_EQ(topology.job_ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(topology.stage, rank < 2 ? 0 : 1);
  EXPECT_EQ(topology.tensor_rank, rank % 2);
  EXPECT_EQ(topology.tensor_ranks, rank < 2 ? (std::vector<int>{0, 1}) : (std::vector<int>{2, 3}));
  EXPECT_EQ(topology.next_rank, rank < 2 ? rank + 2 : -1);
  EXPECT_EQ(topology.previous_rank, rank < 2 ? -1 : rank - 2);
  EXPECT_EQ(topology.pipeline_ranks, (std::vector<int>{rank % 2, rank % 2 + 2}));
  int tensor_size = 0, tensor_rank = -1;
  MPI_Comm_size(topology.tensor_comm.get(), &tensor_size);
  MPI_Comm_rank(topology.tensor_comm.get(), &tensor_rank);
  EXPECT_EQ(tensor_size, 2);
  EXPECT_EQ(tensor_rank, topology.tensor_rank);
  auto backend = kernels::make_cpu_backend();
  runtime::MpiTensorGroup group(topology, *backend, 20);
  std::vector<float> data = {static_cast<float>(rank), 1.0f};
  group.sum(data.data(), data.size());
  const float unit_sum = rank < 2 ? 1.0f : 5.0f;  // 0 + 1, 2 + 3
  EXPECT_EQ(data, (std::vector<float>{unit_sum, 2.0f}));
  std::vector<float> maxima = {static_cast<float>(rank), -static_cast<float>(rank)};
  group.max(maxima.data(), maxima.size());
  EXPECT_EQ(maxima, (std::vector<float>{rank < 2 ? 1.0f : 3.0f, rank < 2 ? 0.0f : -2.0f}));
  double value = rank;
  group.sum_values(&value, 1);
  EXPECT_EQ(value, unit_sum);
}

}  // namespace
