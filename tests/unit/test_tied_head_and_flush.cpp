// The tied embedding's exchange between a pipeline's two ends, compute
// utilisation, and the recommended flush size. Expected values by hand (in
// the comments) or, for the recommendation, by brute force in the test.
#include <gtest/gtest.h>

#include <limits>

#include "geotrain/plan/flush_advisor.hpp"
#include "geotrain/plan/simulator.hpp"
#include "plan_test_support.hpp"

namespace geotrain::plan {
namespace {

using testing::grid_plan;
using testing::uniform_network;

constexpr double kTol = 1e-12;

// Two stages, one micro-batch: forward 0.1 / 0.15 s, backward 0.2 / 0.25 s,
// activations 1e4 B, the tied embedding 4e6 B; no data parallelism.
PipelineWork two_stage_work(double tied_bytes) {
  PipelineWork w;
  w.forward_s = {0.1, 0.15};
  w.backward_s = {0.2, 0.25};
  w.activation_bytes = 1e4;
  w.gradient_bytes = {0.0, 0.0};
  w.tied_embedding_bytes = tied_bytes;
  return w;
}

// Latency 10 ms everywhere; 1e6 B/s, and `back` B/s from device 1 to 0.
Network two_devices(double back) { return testing::two_device_network(0.01, 1e6, back); }

TEST(TiedEmbedding, TwoStageTransferByHand) {
  // F0 0 -> 0.1; activation 1e4 / 1e6 = 0.01 + 0.01 latency: arrives 0.12;
  // F1 0.12 -> 0.27, B1 0.27 -> 0.52; gradient back arrives 0.54; B0 0.54 -> 0.74.
  // Tied: 4e6 / 1e6 + 0.01 = 4.01 s each way; 0 -> 1 from 0.74 ends 4.75,
  // 1 -> 0 from 0.52 ends 4.53. The step ends at 4.75.
  const SimulationResult none = simulate(two_devices(1e6), grid_plan(2, 1), two_stage_work(0));
  EXPECT_NEAR(none.iteration_s, 0.74, kTol);
  EXPECT_EQ(none.tied_exchange_s, 0.0);
  const SimulationResult tied = simulate(two_devices(1e6), grid_plan(2, 1), two_stage_work(4e6));
  EXPECT_NEAR(tied.pipeline_phase_s, 0.74, kTol);
  EXPECT_NEAR(tied.tied_exchange_s, 4.01, kTol);
  EXPECT_NEAR(tied.iteration_s, 4.75, kTol);
  // Utilisation: devices compute 0.3 and 0.4 s of 4.75.
  EXPECT_NEAR(tied.utilisation_mean, 0.35 / 4.75, kTol);
  EXPECT_NEAR(tied.utilisation_min, 0.3 / 4.75, kTol);
  EXPECT_NEAR(none.utilisation_mean, 0.35 / 0.74, kTol);
}

TEST(TiedEmbedding, TheSlowerDirectionSetsTheEnd) {
  // 1 -> 0 at 5e5 B/s: the gradient back takes 0.02 + 0.01, arrives 0.55;
  // B0 0.55 -> 0.75; 0 -> 1 ends 0.75 + 4.01 = 4.76; 1 -> 0 takes 8.01 from 0.52: 8.53.
  const SimulationResult r = simulate(two_devices(5e5), grid_plan(2, 1), two_stage_work(4e6));
  EXPECT_NEAR(r.tied_exchange_s, 8.01, kTol);
  EXPECT_NEAR(r.iteration_s, 8.53, kTol);
}

TEST(TiedEmbedding, StartsAfterEachEndsDataParallelExchange) {
  // 2 stages x 2 replicas on 4 devices, no latency, 1e6 B/s. Per replica:
  // F0 0 -> 0.1, activation 0.01, F1 0.11 -> 0.21, B1 -> 0.41, back 0.42,
  // B0 -> 0.62. Direct exchange of whole buffers: 2e6 B = 2 s, 1e6 B = 1 s;
  // stage 0 ready at 2.62, stage 1 at 1.41. Tied 4e6 B = 4 s: 0 -> 1 ends
  // 6.62, 1 -> 0 ends 5.41. Without it the step ends at 2.62.
  PipelineWork w;
  w.forward_s = {0.1, 0.1};
  w.backward_s = {0.2, 0.2};
  w.activation_bytes = 1e4;
  w.gradient_bytes = {2e6, 1e6};
  w.dp_scheme = DataParallelScheme::direct;
  const Network net = uniform_network(4, 1e6);
  EXPECT_NEAR(simulate(net, grid_plan(2, 2), w).iteration_s, 2.62, kTol);
  w.tied_embedding_bytes = 4e6;
  EXPECT_NEAR(simulate(net, grid_plan(2, 2), w).iteration_s, 6.62, kTol);
}

TEST(TiedEmbedding, WorkFromTheHeadSetting) {
  // Tiny shape: vocabulary 256 x hidden 128 = 32,768 head parameters.
  SimulationConfig c;
  c.model = TrainingShape(ModelShape{}, 16.0 * 128, 2, 4);
  c.global_batch_sequences = 16;
  const double stage1 = stage_parameters(c.model, 1, 2);
  EXPECT_EQ(pipeline_work(c, 2, 1).tied_embedding_bytes, 0.0);  // no head
  c.lm_head = true;  // tied: the last stage's copy of wte, swapped in fp32
  PipelineWork w = pipeline_work(c, 2, 1);
  EXPECT_EQ(w.tied_embedding_bytes, 32768.0 * 4);
  EXPECT_EQ(w.gradient_bytes[1], (stage1 + 32768.0) * 4);
  EXPECT_EQ(pipeline_work(c, 1, 1).gradient_bytes[0], stage_parameters(c.model, 0, 1) * 4);  // one stage: wte is the head
  EXPECT_EQ(pipeline_work(c, 1, 1).tied_embedding_bytes, 0.0);
  c.tied_head = false;  // untied: its own head on the last stage, nothing swapped
  w = pipeline_work(c, 2, 1);
  EXPECT_EQ(w.tied_embedding_bytes, 0.0);
  EXPECT_EQ(w.gradient_bytes[1], (stage1 + 32768.0) * 4);
  EXPECT_EQ(pipeline_work(c, 1, 1).gradient_bytes[0], (stage_parameters(c.model, 0, 1) + 32768.0) * 4);
}

// Tiny model, 2 stages of 2 layers, 1 replica, batch 16 of 1 sequence.
SimulationConfig tiny_config() { return testing::simulation_config(ModelShape{}, 16, 1.0, 0.5); }

TEST(FlushRecommendation, GPipeFillAndDrainByHand) {
  // Infinite bandwidth: flushes of m take (m + 1)(tf + tb) each, 16 / m of
  // them, so utilisation = 16 / (16 + 16 / m) = m / (m + 1):
  // m = 1, 2, 4, 8, 16 -> 0.5, 0.667, 0.8, 0.889, 0.941.
  const Network net = uniform_network(2, std::numeric_limits<double>::infinity());
  const SimulationConfig c = tiny_config();
  const FlushRecommendation f = recommend_flush(net, grid_plan(2, 1), c, 0.02);
  ASSERT_EQ(f.candidates.size(), 5u);
  for (size_t i = 0; i < f.candidates.size(); ++i) {
    const double m = f.candidates[i].micro_batches_per_flush;
    EXPECT_EQ(m, 1 << i);
    EXPECT_NEAR(f.candidates[i].utilisation_mean, m / (m + 1), kTol);
    EXPECT_NEAR(f.candidates[i].utilisation_min, m / (m + 1), kTol);
  }
  EXPECT_EQ(f.candidates[f.best].micro_batches_per_flush, 16);
  // 2 %: >= 0.98 x 16/17 = 0.922 -> 16; 6 %: >= 0.885 -> 8 (0.889); 20 %: >= 0.753 -> 4.
  EXPECT_EQ(f.choice().micro_batches_per_flush, 16);
  EXPECT_EQ(recommend_flush(net, grid_plan(2, 1), c, 0.06).choice().micro_batches_per_flush, 8);
  EXPECT_EQ(recommend_flush(net, grid_plan(2, 1), c, 0.20).choice().micro_batches_per_flush, 4);
}

TEST(FlushRecommendation, MatchesABruteForceOverDivisors) {
  // Reference example A's network, 2 stages x 2 replicas, batch 48:
  // 24 micro-batches per replica, flush sizes 1, 2, 3, 4, 6, 8, 12, 24.
  const Network net = testing::example_a_network();
  Plan plan = grid_plan(2, 2);
  plan.stages = {{0, 2}, {1, 3}};
  SimulationConfig c = tiny_config();
  c.global_batch_sequences = 48;
  c.lm_head = true;
  const double tolerance = 0.03;
  std::vector<int> sizes;
  std::vector<double> utilisation;
  for (int m = 1; m <= 24; ++m) {
    if (24 % m != 0) continue;
    c.micro_batches_per_flush = m;
    sizes.push_back(m);
    utilisation.push_back(simulate(net, plan, c).utilisation_mean);
  }
  const double best = *std::max_element(utilisation.begin(), utilisation.end());
  size_t expected = 0;
  while (utilisation[expected] < (1 - tolerance) * best) ++expected;
  const FlushRecommendation f = recommend_flush(net, plan, c, tolerance);
  ASSERT_EQ(f.candidates.size(), sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(f.candidates[i].micro_batches_per_flush, sizes[i]);
    EXPECT_EQ(f.candidates[i].utilisation_mean, utilisation[i]);
  }
  EXPECT_EQ(f.choice().micro_batches_per_flush, sizes[expected]);
  EXPECT_EQ(f.candidates[f.best].utilisation_mean, best);
}

}  // namespace
}  // namespace geotrain::plan

namespace geotrain::plan {
namespace {

// One stage, two replicas on a 10 ms, 1e6 B/s pair (direct: one swap costs
// 0.01 + bytes / 1e6). Forward 0.1 s, backward 0.1 -> 0.5 s; gradient 3e5 B,
// of which the layers' 2e5 B appear evenly over the backward.
TEST(GradientBuckets, OverlapWithTheLastBackwardByHand) {
  PipelineWork w;
  w.forward_s = {0.1};
  w.backward_s = {0.4};
  w.gradient_bytes = {3e5};
  w.layer_gradient_bytes = {2e5};
  w.dp_scheme = DataParallelScheme::direct;
  const Network net = two_devices(1e6);
  const Plan plan = testing::grid_plan(1, 2);
  // After the backward: 0.5 + 0.01 + 0.3 = 0.81.
  EXPECT_NEAR(simulate(net, plan, w).iteration_s, 0.81, 1e-12);
  // Buckets of 1e5 B (0.1 s of bytes each; in flight together, so one 10 ms
  // latency at the end): the first is ready at 0.1 + 0.4 x 1/2 = 0.3, its
  // bytes leave by 0.4; the second is ready at 0.5, out by 0.6; the rest
  // (1e5 B of embeddings) by 0.7, arriving 0.71: 0.21 s after the backward.
  w.bucket_bytes = 1e5;
  const SimulationResult bucketed = simulate(net, plan, w);
  EXPECT_NEAR(bucketed.iteration_s, 0.71, 1e-12);
  ASSERT_EQ(bucketed.stage_datap_s.size(), 1u);
  EXPECT_NEAR(bucketed.stage_datap_s[0], 0.21, 1e-12);
  // A bucket larger than the layers' gradient never fills early: 0.81 again.
  w.bucket_bytes = 2.5e5;
  EXPECT_NEAR(simulate(net, plan, w).iteration_s, 0.81, 1e-12);
}

}  // namespace
}  // namespace geotrain::plan
