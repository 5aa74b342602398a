// The whole start-up on this job: probe -> plan on rank 0 with a model's
// workload -> broadcast -> communicators; every rank logs its place.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstdio>

#include "geotrain/plan/workload.hpp"
#include "geotrain/mpi/mpi_check.hpp"
#include "geotrain/mpi/mpi_plan.hpp"
#include "geotrain/mpi/mpi_probe.hpp"

namespace {

using namespace geotrain;

TEST(Startup, ProbePlanBroadcastTopology) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_EQ(size % 2, 0) << "run with an even number of ranks";
  runtime::ProbeOptions probe;
  probe.large_bytes = 64 << 10;
  probe.deadline_s = 30;
  const plan::Network net = runtime::probe_network(MPI_COMM_WORLD, probe);

  plan::TrainingShape model;  // gpt3-xl shape: only its communication sizes matter here
  const plan::Workload workload = plan::workload_from_model(model, 2, size / 2);
  plan::SearchOptions options;
  options.candidates = 50;
  const plan::Plan p = runtime::plan_on_root_and_broadcast(MPI_COMM_WORLD, net, workload, plan::Placement::planned,
                                                                   options, 30);
  EXPECT_EQ(p.pipeline_stages, 2);
  EXPECT_EQ(p.data_parallel, size / 2);
  EXPECT_TRUE(runtime::ranks_agree(MPI_COMM_WORLD, p.hash(), 30, "test"));

  const auto topology = runtime::make_topology(MPI_COMM_WORLD, p, 30);
  std::fprintf(stderr, "plan %016llx: %s\n", static_cast<unsigned long long>(p.hash()),
               runtime::describe(topology).c_str());
  EXPECT_EQ(p.stages[topology.stage][topology.replica], topology.rank);
  EXPECT_EQ(topology.previous_rank < 0, topology.stage == 0);
  EXPECT_EQ(topology.next_rank < 0, topology.stage == 1);
}

}  // namespace
