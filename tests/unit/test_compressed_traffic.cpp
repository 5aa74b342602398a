// Compressed traffic in the planner: the encoded sizes (one formula shared
// with the runtime's codec), the cost model's volumes, and the simulated
// step time. Every expected value is worked out by hand in the comments.
#include <gtest/gtest.h>

#include "geotrain/common/wire_bytes.hpp"
#include "geotrain/plan/cost_model.hpp"
#include "geotrain/plan/simulator.hpp"
#include "geotrain/runtime/wire_codec.hpp"
#include "plan_test_support.hpp"

namespace geotrain::plan {
namespace {

using testing::grid_plan;
using testing::two_device_network;

WireEncoding encoding(WireFormat format, int group = 64, double fraction = 0.01) { return {format, group, fraction}; }

TEST(WireBytes, HandCountedSizes) {
  // fp32: 4 bytes a value.
  EXPECT_EQ(wire_encoded_bytes(encoding(WireFormat::fp32), std::size_t{1000}), 4000u);
  // int8, groups of 64: 1000 values = 16 groups (15 x 64 = 960 < 1000), 16 fp32 scales + 1000 codes.
  EXPECT_EQ(wire_encoded_bytes(encoding(WireFormat::int8), std::size_t{1000}), 16u * 4 + 1000);
  // int4: 1001 values, 16 groups: 64 bytes of scales + ceil(1001 / 2) = 501 bytes of codes.
  EXPECT_EQ(wire_encoded_bytes(encoding(WireFormat::int4), std::size_t{1001}), 565u);
  // int4, groups of 32: 64 values = 2 scales + 32 bytes.
  EXPECT_EQ(wire_encoded_bytes(encoding(WireFormat::int4, 32), std::size_t{64}), 40u);
  // top-k 1%: 1000 values keep 10 (index, value) pairs of 8 bytes; 50 values keep ceil(0.5) = 1.
  EXPECT_EQ(wire_encoded_bytes(encoding(WireFormat::topk), std::size_t{1000}), 80u);
  EXPECT_EQ(wire_encoded_bytes(encoding(WireFormat::topk), std::size_t{50}), 8u);
  EXPECT_EQ(wire_encoded_bytes(encoding(WireFormat::topk, 64, 1.0), std::size_t{7}), 56u);
  EXPECT_EQ(wire_encoded_bytes(encoding(WireFormat::topk), std::size_t{0}), 0u);
  // The planner's counts are rounded to whole values: 999.6 and 1000.4 are 1000.
  EXPECT_EQ(wire_encoded_bytes(encoding(WireFormat::int8), 999.6), 1064.0);
  EXPECT_EQ(wire_encoded_bytes(encoding(WireFormat::int8), 1000.4), 1064.0);
  EXPECT_EQ(wire_encoded_bytes(encoding(WireFormat::int8), 0.0), 0.0);
}

TEST(WireBytes, TheRuntimeCodecSizesItsBuffersWithTheSameFormula) {
  for (WireFormat format : {WireFormat::fp32, WireFormat::int8, WireFormat::int4, WireFormat::topk}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{65}, std::size_t{100003}}) {
      const runtime::WireCodec codec{format, 32, 0.05};
      EXPECT_EQ(codec.encoded_bytes(n), wire_encoded_bytes(encoding(format, 32, 0.05), n)) << to_string(format) << " " << n;
    }
  }
}

// 4 layers, hidden 128, vocabulary 256, sequence 128; 16 sequences per step.
TrainingShape toy_shape() { return TrainingShape(ModelShape{"toy", 4, 128, 4, 256, 128}, 16.0 * 128, 2, 4); }

TEST(CompressedWorkload, VolumesOfEachClass) {
  // pp 2 x dp 2. c_PP: 2048 tokens / 2 x 128 = 131,072 values, fp16 262,144 B.
  // Parameters: 4 x (12 x 128^2 + 13 x 128) + (256 + 128) x 128 + 2 x 128 = 842,496;
  // c_DP: 421,248 values a stage, fp32 1,684,992 B.
  TrainingShape m = toy_shape();
  Workload plain = workload_from_model(m, 2, 2);
  EXPECT_EQ(plain.c_pp_bytes, 262144.0);
  EXPECT_EQ(plain.c_pp_back_bytes(), 262144.0);
  EXPECT_FALSE(plain.c_pp_gradient_bytes.has_value());
  EXPECT_EQ(plain.c_dp_bytes, 1684992.0);
  // int8 activations: 131,072 codes + 2,048 scales x 4 = 139,264; the way back keeps fp16.
  m.wire.activations = encoding(WireFormat::int8);
  Workload w = workload_from_model(m, 2, 2);
  EXPECT_EQ(w.c_pp_bytes, 139264.0);
  EXPECT_EQ(w.c_pp_back_bytes(), 262144.0);
  // int4 activation gradients: 65,536 bytes of codes + 8,192 of scales = 73,728.
  m.wire.activation_gradients = encoding(WireFormat::int4);
  // int4 gradients: 421,248 / 64 = 6,582 groups -> 26,328 + 210,624 = 236,952.
  m.wire.gradients = encoding(WireFormat::int4);
  w = workload_from_model(m, 2, 2);
  EXPECT_EQ(w.c_pp_back_bytes(), 73728.0);
  EXPECT_EQ(w.c_dp_bytes, 236952.0);
  // top-k 1%: ceil(4,212.48) = 4,213 pairs of 8 bytes = 33,704.
  m.wire.gradients = encoding(WireFormat::topk);
  EXPECT_EQ(workload_from_model(m, 2, 2).c_dp_bytes, 33704.0);
}

TEST(CompressedWorkload, ThePaperPresetIsUnchangedUnlessAsked) {
  Workload paper = dtfm_original_workload(8, 8);
  const Workload before = paper;
  encode_traffic(paper, TrafficEncoding{});
  EXPECT_EQ(paper.c_pp_bytes, before.c_pp_bytes);
  EXPECT_EQ(paper.c_dp_bytes, before.c_dp_bytes);
  EXPECT_FALSE(paper.c_pp_gradient_bytes.has_value());
  // int8 gradients: 6.5e8 B / 4 = 1.625e8 values, ceil(/64) = 2,539,063 scales.
  TrafficEncoding int8_gradients;
  int8_gradients.gradients = encoding(WireFormat::int8);
  encode_traffic(paper, int8_gradients);
  EXPECT_EQ(paper.c_dp_bytes, 2539063.0 * 4 + 1.625e8);
}

TEST(CompressedWorkload, CostModelLinksCarryBothDirectionsSizes) {
  // 2 devices, pp 2 x dp 1, latency 1 ms, 1e6 B/s. Per direction 2048 x 128 =
  // 262,144 values: int8 forward 262,144 + 4,096 x 4 = 278,528 B; int4 back
  // 131,072 + 16,384 = 147,456 B. link = 2 x 0.001 + (278,528 + 147,456) / 1e6.
  Network net = two_device_network(0.001, 1e6, 1e6);
  TrainingShape m = toy_shape();
  EXPECT_NEAR(CostModel(net, workload_from_model(m, 2, 1)).pipeline_link(0, 1), 0.002 + 2 * 524288 / 1e6, 1e-15);
  m.wire.activations = encoding(WireFormat::int8);
  m.wire.activation_gradients = encoding(WireFormat::int4);
  EXPECT_NEAR(CostModel(net, workload_from_model(m, 2, 1)).pipeline_link(0, 1), 0.427984, 1e-15);
  // Asymmetric: 1 -> 0 at 2e6 B/s. Each way carries the mean, 212,992 B:
  // 0.002 + 0.212992 + 0.106496 = 0.321488, the same seen from either end.
  net.bandwidth_bytes_per_s = {1.0, 1e6, 2e6, 1.0};
  const CostModel asymmetric(net, workload_from_model(m, 2, 1));
  EXPECT_NEAR(asymmetric.pipeline_link(0, 1), 0.321488, 1e-15);
  EXPECT_EQ(asymmetric.pipeline_link(0, 1), asymmetric.pipeline_link(1, 0));
}

// A step where communication dominates (testing::communication_bound):
// compute at 1e18 FLOP/s (a layer of s = h = 1024 is 24 x 1024^3 x 7/6 =
// 3.0064771072e10 FLOPs: 3.0064771072e-8 s forward, 3x backward), links of
// 1e6 B/s and no latency.
using testing::communication_bound;

TEST(CompressedSimulation, PipelineMessagesShrinkTheStepByTheSavedBytes) {
  // 2 stages of 1 layer, one micro-batch of 1024 x 1024 = 1,048,576 values:
  // the step is F0, the activation, F1, B1, the gradient back, B0.
  // Compute 2 x (1 + 3) x 3.0064771072e-8 = 2.40518168576e-7 s.
  // fp16 both ways: 2 x 2,097,152 B / 1e6 = 4.194304 s.
  // int8 both ways: 1,048,576 + 16,384 x 4 = 1,114,112 B each: 2.228224 s (1.96608 s less).
  const double compute = 2.40518168576e-7;
  SimulationConfig c = communication_bound(ModelShape{"wide", 2, 1024, 8, 64, 1024}, 1);
  const Network net = two_device_network(0.0, 1e6, 1e6);
  const double fp16 = simulate(net, grid_plan(2, 1), c).iteration_s;
  EXPECT_NEAR(fp16, 4.194304 + compute, 1e-12);
  c.model.wire.activations = encoding(WireFormat::int8);
  c.model.wire.activation_gradients = encoding(WireFormat::int8);
  const double int8 = simulate(net, grid_plan(2, 1), c).iteration_s;
  EXPECT_NEAR(int8, 2.228224 + compute, 1e-12);
  EXPECT_NEAR(fp16 - int8, 1.96608, 1e-12);
  // int4 forward (524,288 + 65,536 = 589,824 B), fp32 back as the runtime
  // sends it uncompressed (4 bytes a value: 4,194,304 B): 4.784128 s.
  c.model.wire.activations = encoding(WireFormat::int4);
  c.model.wire.activation_gradients = encoding(WireFormat::fp32);
  EXPECT_NEAR(simulate(net, grid_plan(2, 1), c).iteration_s, 4.784128 + compute, 1e-12);
}

TEST(CompressedSimulation, GradientExchangeShrinksByTheSavedBytes) {
  // 1 stage x 2 replicas, the direct exchange (D = 2: one swap of the whole
  // buffer). Parameters: 12 x 64^2 + 13 x 64 + (64 + 64) x 64 + 2 x 64 = 58,304.
  // fp32 233,216 B: 0.233216 s; int8 58,304 + 911 x 4 = 61,948 B: 0.061948 s;
  // top-k 1%: ceil(583.04) = 584 pairs = 4,672 B: 0.004672 s.
  SimulationConfig c = communication_bound(ModelShape{"narrow", 1, 64, 4, 64, 64}, 2);
  c.dp_scheme = DataParallelScheme::direct;
  const Network net = two_device_network(0.0, 1e6, 1e6);
  const SimulationResult fp32 = simulate(net, grid_plan(1, 2), c);
  EXPECT_NEAR(fp32.datap_comm_s, 0.233216, 1e-15);
  c.model.wire.gradients = encoding(WireFormat::int8);
  const SimulationResult int8 = simulate(net, grid_plan(1, 2), c);
  EXPECT_NEAR(int8.datap_comm_s, 0.061948, 1e-15);
  EXPECT_NEAR(fp32.iteration_s - int8.iteration_s, 0.171268, 1e-12);
  c.model.wire.gradients = encoding(WireFormat::topk);
  EXPECT_NEAR(simulate(net, grid_plan(1, 2), c).datap_comm_s, 0.004672, 1e-15);
}

TEST(CompressedSimulation, TiedEmbeddingSwapShrinksByTheSavedBytes) {
  // 2 stages x 1 replica with the tied head: the first and the last stage
  // swap wte's gradient, V x h = 64 x 64 = 4,096 values, every step.
  // fp32 16,384 B: 0.016384 s each way; int8 4,096 + 64 groups x 4 = 4,352 B:
  // 0.004352 s; int4 2,048 + 256 = 2,304 B: 0.002304 s.
  SimulationConfig c = communication_bound(ModelShape{"narrow", 2, 64, 4, 64, 64}, 1);
  c.lm_head = true;
  const Network net = two_device_network(0.0, 1e6, 1e6);
  const SimulationResult fp32 = simulate(net, grid_plan(2, 1), c);
  EXPECT_DOUBLE_EQ(fp32.tied_exchange_s, 0.016384);
  c.model.wire.tied_embedding = encoding(WireFormat::int8);
  EXPECT_DOUBLE_EQ(simulate(net, grid_plan(2, 1), c).tied_exchange_s, 0.004352);
  c.model.wire.tied_embedding = encoding(WireFormat::int4);
  const SimulationResult int4 = simulate(net, grid_plan(2, 1), c);
  EXPECT_DOUBLE_EQ(int4.tied_exchange_s, 0.002304);
  EXPECT_LT(int4.iteration_s, fp32.iteration_s);
  // An untied head swaps nothing, whatever the format.
  c.tied_head = false;
  EXPECT_EQ(simulate(net, grid_plan(2, 1), c).tied_exchange_s, 0.0);
}

}  // namespace
}  // namespace geotrain::plan
