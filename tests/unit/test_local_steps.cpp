// Local steps (DiLoCo-style data parallelism) in the cost model and the
// simulator: the pseudo-gradient's exchange every H steps, amortised, and
// streamed in fragments that overlap the following steps. Expected values
// by hand (in the comments); the world-wide case compares two searches.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/scenario.hpp"
#include "geotrain/plan/search.hpp"
#include "geotrain/plan/simulator.hpp"
#include "plan_test_support.hpp"

namespace geotrain::plan {
namespace {

using testing::grid_plan;
using testing::two_device_network;

constexpr double kTol = 1e-12;

// One stage on two replicas (devices 0 and 1), one micro-batch: forward
// 0.1 s, backward 0.2 s, so a step without data-parallel traffic is 0.3 s.
// The direct exchange with D = 2 swaps the whole buffer: the slower
// direction, latency 10 ms + bytes / (5e5 B/s from device 1 to device 0).
PipelineWork one_stage_two_replicas(double gradient_bytes, OuterSync outer) {
  PipelineWork w;
  w.forward_s = {0.1};
  w.backward_s = {0.2};
  w.gradient_bytes = {gradient_bytes};
  w.dp_scheme = DataParallelScheme::direct;
  w.outer = outer;
  return w;
}

// H local steps at fp32, the whole stage at once or in `fragments`.
OuterSync every(int h) {
  OuterSync outer;
  outer.local_steps = h;
  return outer;
}

OuterSync streamed(int h, int fragments) {
  OuterSync outer = every(h);
  outer.fragments = fragments;
  return outer;
}

OuterSync sites_every(int h) {
  OuterSync outer = every(h);
  outer.within_site = true;
  return outer;
}

const Network& toy_network() {
  static const Network net = two_device_network(0.01, 1e6, 5e5);
  return net;
}

TEST(LocalSteps, TwoDeviceStepTimeByHand) {
  // Exchange of 1e6 B: max(0.01 + 1e6 / 1e6, 0.01 + 1e6 / 5e5) = 2.01 s.
  // Synchronous: 0.3 + 2.01 = 2.31 s. H = 10: every tenth step waits 2.01 s,
  // 0.201 s per step: 0.501 s; utilisation 0.3 / 0.501.
  const SimulationResult sync = simulate(toy_network(), grid_plan(1, 2), one_stage_two_replicas(1e6, {}));
  EXPECT_NEAR(sync.iteration_s, 2.31, kTol);
  const SimulationResult local = simulate(toy_network(), grid_plan(1, 2), one_stage_two_replicas(1e6, every(10)));
  EXPECT_NEAR(local.local_step_s, 0.3, kTol);
  EXPECT_NEAR(local.outer_exposed_s, 0.201, kTol);
  EXPECT_NEAR(local.iteration_s, 0.501, kTol);
  EXPECT_NEAR(local.datap_comm_s, 0.201, kTol);
  ASSERT_EQ(local.stage_datap_s.size(), 1u);
  EXPECT_NEAR(local.stage_datap_s[0], 2.01, kTol);
  EXPECT_NEAR(local.utilisation_mean, 0.3 / 0.501, kTol);
}

// Compute at 1e18 FLOP/s (negligible), links of 1e6 B/s without latency.
// (testing::communication_bound, with the direct data-parallel exchange)
SimulationConfig communication_bound(const ModelShape& shape, int batch) {
  SimulationConfig c = testing::communication_bound(shape, batch);
  c.dp_scheme = DataParallelScheme::direct;
  return c;
}

TEST(LocalSteps, OuterWireBytesFromTheModel) {
  // 1 layer, h = 64, s = 64, V = 64: 12 x 64^2 + 13 x 64 + (64 + 64) x 64 +
  // 2 x 64 = 58,304 parameters. int8 on the wire: 58,304 + ceil(58,304 / 64)
  // = 911 scales x 4 = 61,948 B, 0.061948 s at 1e6 B/s; H = 4: 0.015487 s per step.
  // Compute: one layer forward 24 x 64 x 64^2 x (1 + 1/6) = 7,340,032 FLOPs,
  // four passes with recomputation, at 1e18 FLOP/s.
  SimulationConfig c = communication_bound(ModelShape{"narrow", 1, 64, 4, 64, 64}, 2);
  c.model.outer = {4, WireEncoding{WireFormat::int8}, 0};
  const SimulationResult r = simulate(two_device_network(0.0, 1e6, 1e6), grid_plan(1, 2), c);
  EXPECT_NEAR(r.stage_datap_s[0], 0.061948, 1e-15);
  EXPECT_NEAR(r.datap_comm_s, 0.015487, 1e-15);
  EXPECT_NEAR(r.iteration_s, 4 * 7340032 / 1e18 + 0.015487, 1e-15);
  // The per-step gradient compression does not apply: there is no per-step exchange.
  c.model.wire.gradients = WireEncoding{WireFormat::int4};
  EXPECT_EQ(simulate(two_device_network(0.0, 1e6, 1e6), grid_plan(1, 2), c).iteration_s, r.iteration_s);
  // The cost model: DATAP of the same pseudo-gradient, a quarter per step:
  // 2 x (61,948 / 2) / 1e6 / 4 = 0.015487 s.
  const Workload w = workload_from_model(c.model, 1, 2);
  EXPECT_EQ(w.datap_period_steps, 4);
  EXPECT_NEAR(CostModel(two_device_network(0.0, 1e6, 1e6), w).datap({0, 1}), 0.015487, 1e-15);
}

TEST(LocalSteps, OneLocalStepInFp32IsTheSynchronousModel) {
  // Two sites of example A, 2 stages x 2 replicas, each stage group across
  // the sites; an exchange after the backward (no buckets), no tied head.
  const Network net = testing::example_a_network();
  Plan plan = grid_plan(2, 2);
  plan.stages = {{0, 2}, {1, 3}};
  for (DataParallelScheme scheme : {DataParallelScheme::paper, DataParallelScheme::direct, DataParallelScheme::ring}) {
    SimulationConfig c;
    c.model = TrainingShape(ModelShape{"small", 4, 256, 4, 512, 256}, 8.0 * 256, 2, 4);
    c.global_batch_sequences = 8;
    c.dp_scheme = scheme;
    const SimulationResult sync = simulate(net, plan, c);
    c.model.outer = {1, WireEncoding{WireFormat::fp32}, 0};
    const SimulationResult local = simulate(net, plan, c);
    EXPECT_NEAR(local.iteration_s, sync.iteration_s, 1e-12 * sync.iteration_s) << to_string(scheme);
    EXPECT_NEAR(local.datap_comm_s, sync.datap_comm_s, 1e-12 * sync.datap_comm_s) << to_string(scheme);
    EXPECT_EQ(local.stage_datap_s, sync.stage_datap_s) << to_string(scheme);
    const Workload sync_load = workload_from_model(TrainingShape(ModelShape{"small", 4, 256, 4, 512, 256}, 8.0 * 256, 2, 4), 2, 2);
    const Workload local_load = workload_from_model(c.model, 2, 2);
    EXPECT_EQ(CostModel(net, local_load).datap({0, 2, 1, 3}), CostModel(net, sync_load).datap({0, 2, 1, 3}));
  }
}

TEST(LocalSteps, FragmentsOverlapTheFollowingStepsByHand) {
  // H = 10 in 5 fragments: one every 2 steps, each exchange during the 2
  // inner steps until the next starts (the runtime's window): 2 x 0.3 = 0.6 s.
  // 1e6 B: a fragment of 2e5 B takes max(0.21, 0.41) = 0.41 s: hidden, 0.3 s per step.
  const SimulationResult hidden = simulate(toy_network(), grid_plan(1, 2), one_stage_two_replicas(1e6, streamed(10, 5)));
  EXPECT_NEAR(hidden.outer_exposed_s, 0.0, kTol);
  EXPECT_NEAR(hidden.iteration_s, 0.3, kTol);
  // 4e6 B: a fragment of 8e5 B takes max(0.81, 1.61) = 1.61 s; 1.01 s beyond
  // the window, once per 2 steps: 0.505 s per step, 0.805 s a step.
  const SimulationResult exposed = simulate(toy_network(), grid_plan(1, 2), one_stage_two_replicas(4e6, streamed(10, 5)));
  EXPECT_NEAR(exposed.outer_exposed_s, 0.505, kTol);
  EXPECT_NEAR(exposed.iteration_s, 0.805, kTol);
  // Not streamed: the whole 4e6 B (0.01 + 8 = 8.01 s) every 10 steps: 0.3 + 0.801.
  const SimulationResult whole = simulate(toy_network(), grid_plan(1, 2), one_stage_two_replicas(4e6, every(10)));
  EXPECT_NEAR(whole.iteration_s, 1.101, kTol);
}

TEST(LocalSteps, BytesCrossingSitesPerStep) {
  // Example A with sites: devices 0, 1 in A, 2, 3 in B. Stage groups
  // {0, 2} and {1, 3} cross the sites; pipelines 0 -> 1 and 2 -> 3 stay inside.
  Network net = testing::example_a_network();
  net.site_of_device = {"A", "A", "B", "B"};
  Plan plan = grid_plan(2, 2);
  plan.stages = {{0, 2}, {1, 3}};
  PipelineWork w;
  w.forward_s = {0.1, 0.1};
  w.backward_s = {0.2, 0.2};
  w.activation_bytes = 1e4;
  w.gradient_bytes = {3e6, 1e6};
  w.micro_batches_per_flush = 4;
  // The paper's exchange with D = 2: each of the 2 ordered pairs sends
  // 2 x c / 2 = c: 2 x (3e6 + 1e6) = 8e6 B per step; no pipeline bytes.
  SimulationResult r = simulate(net, plan, w);
  EXPECT_EQ(r.cross_site_pipeline_bytes, 0.0);
  EXPECT_NEAR(r.cross_site_datap_bytes, 8e6, 1e-6);
  w.outer = every(50);
  EXPECT_NEAR(simulate(net, plan, w).cross_site_datap_bytes, 8e6 / 50, 1e-9);
  // Pipelines across the sites instead: 2 replicas x 4 micro-batches x 2 x 1e4 B.
  plan.stages = {{0, 1}, {2, 3}};
  r = simulate(net, plan, w);
  EXPECT_NEAR(r.cross_site_pipeline_bytes, 1.6e5, 1e-9);
  EXPECT_EQ(r.cross_site_datap_bytes, 0.0);
}

// Two sites of two devices: inside a site 10 ms and 1e6 B/s, between the
// sites 100 ms and 1e5 B/s.
Network two_sites_of_two() {
  Network net;
  net.device_count = 4;
  for (int u = 0; u < 4; ++u) {
    for (int v = 0; v < 4; ++v) {
      const bool same_site = (u < 2) == (v < 2);
      net.latency_s.push_back(u == v ? 0.0 : same_site ? 0.01 : 0.1);
      net.bandwidth_bytes_per_s.push_back(same_site ? 1e6 : 1e5);
    }
  }
  net.site_of_device = {"A", "A", "B", "B"};
  return net;
}

TEST(LocalSteps, SitesSumEveryStepByHand) {
  // One stage on 4 replicas, one micro-batch: forward 0.1 s, backward 0.2 s.
  // Each site's 2 replicas swap the whole fp32 gradient (1e6 B): 0.01 +
  // 1e6 / 1e6 = 1.01 s, both sites at once, so the inner step is 0.3 + 1.01
  // = 1.31 s. The outer sum over all 4 (direct: shards of 4e5 / 4 = 1e5 B,
  // two phases, the slowest pair across the sites 0.1 + 1e5 / 1e5 = 1.1 s)
  // takes 2.2 s every 10 steps: 0.22 s per step, 1.53 s in all.
  Plan plan = grid_plan(1, 4);
  plan.stages = {{0, 1, 2, 3}};
  PipelineWork w = one_stage_two_replicas(4e5, sites_every(10));
  w.site_gradient_bytes = {1e6};
  SimulationResult r = simulate(two_sites_of_two(), plan, w);
  EXPECT_NEAR(r.local_step_s, 1.31, kTol);
  EXPECT_NEAR(r.outer_exposed_s, 0.22, kTol);
  EXPECT_NEAR(r.iteration_s, 1.53, kTol);
  EXPECT_NEAR(r.datap_comm_s, 1.01 + 0.22, kTol);
  // In buckets of 2.5e5 B from the backward (the layers' 1e6 B ready evenly
  // over its 0.2 s, from 0.1 s): the link sends the four buckets from 0.15,
  // 0.4, 0.65, 0.9 s, 0.25 s each, and the sum ends one latency after the
  // last bytes: 1.15 + 0.01 = 1.16 s.
  w.bucket_bytes = 2.5e5;
  w.layer_gradient_bytes = {1e6};
  r = simulate(two_sites_of_two(), plan, w);
  EXPECT_NEAR(r.local_step_s, 1.16, kTol);
  EXPECT_NEAR(r.iteration_s, 1.38, kTol);
  // Without the sites' sums the inner step is the pipeline's 0.3 s.
  w.outer.within_site = false;
  EXPECT_NEAR(simulate(two_sites_of_two(), plan, w).iteration_s, 0.52, kTol);
  // Sites' sums without their bytes are a caller's mistake, named.
  EXPECT_THROW(simulate(two_sites_of_two(), plan, one_stage_two_replicas(4e5, sites_every(10))), InputError);
}

TEST(LocalSteps, SitesSumEveryStepInTheCostModel) {
  // c_DP of 4e5 B on 1 x 4: with H = 10 at fp32 a pair swaps one shard of
  // 1e5 B each way every 10 steps; a pair inside a site also swaps the
  // per-step shard. Devices 0 and 1 (site A): 2 x (0.01 + 1e5 / 1e6) / 10 +
  // 2 x (0.01 + 1e5 / 1e6) = 0.242 s; devices 0 and 2: 2 x (0.1 + 1e5 / 1e5) / 10 = 0.22 s.
  Workload w;
  w.pipeline_stages = 1;
  w.data_parallel = 4;
  w.c_dp_bytes = 4e5;
  OuterSync outer = sites_every(10);
  apply_outer_sync(w, outer);
  EXPECT_EQ(w.c_dp_site_bytes, 4e5);
  const CostModel model(two_sites_of_two(), w);
  const int same_site[] = {1}, other_site[] = {2};
  EXPECT_NEAR(model.datap_of_device(0, same_site, 1), 0.242, kTol);
  EXPECT_NEAR(model.datap_of_device(0, other_site, 1), 0.22, kTol);
  outer.within_site = false;
  Workload plain = w;
  plain.c_dp_bytes = 4e5, plain.c_dp_site_bytes = 0, plain.datap_period_steps = 1;
  apply_outer_sync(plain, outer);
  EXPECT_NEAR(CostModel(two_sites_of_two(), plain).datap_of_device(0, same_site, 1), 0.022, kTol);
}

// DT-FM's settings (GPipe in flushes of 64, the paper's DATAP) for GPT3-XL
// at batch 256 on 8 x 8, optionally with local steps.
SimulationConfig dtfm_batch_256(int local_steps) {
  SimulationConfig c;
  c.global_batch_sequences = 256;
  c.model.tokens_per_step = 256.0 * c.model.sequence_length;
  c.model.outer.local_steps = local_steps;
  return c;
}

Plan planned(const Network& net, const SimulationConfig& c) {
  SearchOptions options;
  options.seed = 1;
  options.candidates = 300;
  return search_plan(CostModel(net, workload_from_model(c.model, 8, 8)), options).plan;
}

// Whether every group of `groups` (stage groups, or pipelines) lies inside one site.
bool each_inside_one_site(const Network& net, const std::vector<std::vector<int>>& groups) {
  for (const auto& group : groups) {
    std::set<std::string> sites;
    for (int d : group) sites.insert(net.site(d));
    if (sites.size() != 1) return false;
  }
  return true;
}

std::vector<std::vector<int>> pipelines(const Plan& plan) {
  std::vector<std::vector<int>> replicas(plan.data_parallel);
  for (const auto& stage : plan.stages) {
    for (int r = 0; r < plan.data_parallel; ++r) replicas[r].push_back(stage[r]);
  }
  return replicas;
}

TEST(LocalSteps, WorldWideFiftyLocalStepsMovePipelinesInsideSites) {
  const io::Scenario s = io::load_scenario(std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/scenarios/world-wide.toml");
  const SimulationConfig sync = dtfm_batch_256(0), local = dtfm_batch_256(50);
  const Plan sync_plan = planned(s.network, sync), local_plan = planned(s.network, local);
  // Every step's gradient exchange keeps the stage groups inside sites and
  // sends the activations across; exchanging every 50 steps, the pipelines
  // stay inside sites and the groups span them.
  EXPECT_TRUE(each_inside_one_site(s.network, sync_plan.stages));
  EXPECT_TRUE(each_inside_one_site(s.network, pipelines(local_plan)));
  EXPECT_FALSE(each_inside_one_site(s.network, pipelines(sync_plan)));
  const double sync_step = simulate(s.network, sync_plan, sync).iteration_s;
  const double local_step = simulate(s.network, local_plan, local).iteration_s;
  const double sync_plan_local_step = simulate(s.network, sync_plan, local).iteration_s;
  EXPECT_LT(local_step, sync_step);
  EXPECT_LT(local_step, sync_plan_local_step);  // the choice matters under H = 50's model too
}

}  // namespace
}  // namespace geotrain::plan
