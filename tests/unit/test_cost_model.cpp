// The cost model against the hand-computed examples of reference §8.3-8.5.
#include <gtest/gtest.h>

#include "geotrain/plan/bottleneck_matching.hpp"
#include "geotrain/plan/open_path.hpp"
#include "geotrain/plan/plan.hpp"
#include "plan_test_support.hpp"

namespace geotrain::plan {
namespace {

constexpr double kRel = 1e-9;

TEST(CostModel, ExampleAPartitionsMatchHandComputation) {
  const CostModel model(testing::example_a_network(), testing::example_a_workload());
  // P1 = {0,1} | {2,3}: DATAP 1.002, PIPE 1.05, TOTAL 3.102.
  const Plan p1 = complete_plan(model, {0, 1, 2, 3});
  EXPECT_NEAR(p1.cost.datap_s, 1.002, 1.002 * kRel);
  EXPECT_NEAR(p1.cost.pipeline_s, 2 * 1.05, 2.1 * kRel);
  EXPECT_NEAR(p1.cost.total_s(), 3.102, 3.102 * kRel);
  // P2 = {0,2} | {1,3}: DATAP 10.1, bottleneck 0.101 via 0-1, 2-3.
  const Plan p2 = complete_plan(model, {0, 2, 1, 3});
  EXPECT_NEAR(p2.cost.datap_s, 10.1, 10.1 * kRel);
  EXPECT_NEAR(p2.cost.total_s(), 10.302, 10.302 * kRel);
  // P3 = {0,3} | {1,2}: 10.302 by symmetry.
  EXPECT_NEAR(complete_plan(model, {0, 3, 1, 2}).cost.total_s(), 10.302, 10.302 * kRel);
}

TEST(CostModel, ExampleAMatchingChainsDevicesOfTheSameSite) {
  const CostModel model(testing::example_a_network(), testing::example_a_workload());
  const Plan p2 = complete_plan(model, {0, 2, 1, 3});
  // Each replica's pipeline must stay inside a site: 0 feeds 1, 2 feeds 3 (or reverse order).
  for (int r = 0; r < 2; ++r) {
    const int a = p2.stages[0][r], b = p2.stages[1][r];
    EXPECT_EQ(a < 2, b < 2) << "replica " << r << " crosses sites: " << a << " -> " << b;
  }
}

TEST(CostModel, ExampleALiteralScoringUsesListOrder) {
  const CostModel model(testing::example_a_network(), testing::example_a_workload());
  EXPECT_NEAR(literal_plan(model, {0, 2, 1, 3}).cost.total_s(), 10.302, 10.302 * kRel);
  EXPECT_NEAR(literal_plan(model, {0, 2, 3, 1}).cost.total_s(), 12.2, 12.2 * kRel);
}

TEST(BottleneckMatching, ExampleBDiffersFromMinSum) {
  const double cost[] = {0, 4, 4, 6};
  const Matching m = bottleneck_matching(cost, 2);
  EXPECT_EQ(m.bottleneck, 4.0);
  EXPECT_EQ(m.partner[0], 1);
  EXPECT_EQ(m.partner[1], 0);
}

TEST(OpenPath, ExampleCHasNoReturnEdge) {
  const std::vector<double> e = {0, 1, 5, 1, 0, 2, 5, 2, 0};
  const Path path = open_path_exact(e, 3);
  EXPECT_EQ(path.length, 3.0);
  const bool forward = path.order == std::vector<int>{0, 1, 2};
  const bool backward = path.order == std::vector<int>{2, 1, 0};
  EXPECT_TRUE(forward || backward);
}

TEST(CostModel, DataParallelDegreeOneHasNoDatapCost) {
  const CostModel model(testing::example_a_network(), [] {
    Workload w = testing::example_a_workload();
    w.pipeline_stages = 4;
    w.data_parallel = 1;
    return w;
  }());
  EXPECT_EQ(model.datap({0, 1, 2, 3}), 0.0);
}

TEST(CostModel, AsymmetricLinksSumBothDirections) {
  // u -> v is slow, v -> u fast: the link cost counts one of each.
  Network net;
  net.device_count = 2;
  net.latency_s = {0, 0.010, 0.030, 0};
  net.bandwidth_bytes_per_s = {1, 1e9, 2e9, 1};
  Workload w;
  w.pipeline_stages = 2;
  w.data_parallel = 1;
  w.c_pp_bytes = 1e9;
  w.c_dp_bytes = 0;
  const CostModel model(net, w);
  EXPECT_NEAR(model.pipeline_link(0, 1), (0.010 + 1.0) + (0.030 + 0.5), 1e-12);
  EXPECT_EQ(model.pipeline_link(0, 1), model.pipeline_link(1, 0));
}

TEST(CostModel, LowerBoundNeverExceedsBruteForceOptimum) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int pp = 2 + trial % 3, dp = 2;
    const CostModel model(testing::random_network(pp * dp, rng, trial % 2 == 0), testing::small_workload(pp, dp));
    double best = std::numeric_limits<double>::infinity();
    testing::for_each_partition(pp * dp, dp, [&](const Assignment& a) {
      best = std::min(best, complete_plan(model, a).cost.total_s());
    });
    EXPECT_LE(cost_lower_bound(model), best * (1 + 1e-12)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace geotrain::plan
