// The planner's memory model by hand (the runtime's own allocations are
// compared in tests/model/test_memory_model.cpp).
#include <gtest/gtest.h>

#include "geotrain/plan/memory_model.hpp"
#include "geotrain/plan/pipeline_schedule.hpp"

namespace geotrain::plan {
namespace {

MemorySettings runtime_without_reserve() {
  MemorySettings s;
  s.reserved_bytes = 0;
  return s;
}

// GPT3-XL (C = T = 2048, 16 heads, V = 50,257), a middle stage of 3 layers,
// micro-batch 1, 1F1B over 8 stages: 8 activation slots.
TEST(MemoryModelByHand, Gpt3XlMiddleStage) {
  const ModelShape m = gpt3_xl_shape();
  const int slots = activation_slots(Schedule::one_f_one_b, 64, 8);
  ASSERT_EQ(slots, 8);
  const StageMemory mem = stage_memory(m, {3, false, false}, 1, slots, runtime_without_reserve());
  // 3 x (12 C^2 + 13 C) parameters, 16 bytes each.
  EXPECT_EQ(mem.parameters, 151074816.0);
  EXPECT_EQ(mem.state_bytes, 2417197056.0);
  // Per slot: input NC + 3 x (16 NC + 4N + NH T) floats = 205,643,776 x 4 bytes
  // (NH T: the fused attention's log-sum-exp; before it, NH T^2 probabilities).
  EXPECT_EQ(mem.activation_bytes, 8 * 822575104.0);
  // Scratch 14 NC + NH T, receive buffer NC.
  EXPECT_EQ(mem.workspace_bytes, 251789312.0);
  EXPECT_NEAR(mem.total_bytes() / (1 << 30), 8.614, 0.001);
}

TEST(MemoryModelByHand, EmbeddingAndTiedHead) {
  const ModelShape m{"t", 4, 128, 4, 256, 128};
  const double layer = 12.0 * 128 * 128 + 13 * 128;  // 198,272
  const MemorySettings s = runtime_without_reserve();
  EXPECT_EQ(stage_memory(m, {2, true, false}, 1, 1, s).parameters, 2 * layer + 256 * 128 + 128 * 128);
  EXPECT_EQ(stage_memory(m, {2, false, true}, 1, 1, s).parameters, 2 * layer + 256 * 128 + 2 * 128);
  EXPECT_EQ(stage_memory(m, {4, true, true}, 1, 1, s).parameters, 4 * layer + 256 * 128 + 128 * 128 + 2 * 128);
  ModelShape untied = m;
  untied.tied_head = false;  // the last stage's own V x C head; a single stage holds wte and it
  EXPECT_EQ(stage_memory(untied, {2, false, true}, 1, 1, s).parameters, 2 * layer + 256 * 128 + 2 * 128);
  EXPECT_EQ(stage_memory(untied, {4, true, true}, 1, 1, s).parameters, 4 * layer + 2 * 256 * 128 + 128 * 128 + 2 * 128);
  MemorySettings no_head = s;
  no_head.head = false;
  EXPECT_EQ(stage_memory(m, {2, false, true}, 1, 1, no_head).parameters, 2 * layer);
}

TEST(MemoryModelByHand, RecomputationKeepsOnlyLayerInputs) {
  const ModelShape m = gpt3_xl_shape();
  MemorySettings s = runtime_without_reserve();
  s.recompute = true;
  s.activation_storage = ActivationStorage::bf16;  // DT-FM's 16-bit values
  const double NC = 2048.0 * 2048;
  const StageMemory mem = stage_memory(m, {3, false, false}, 1, 8, s);
  EXPECT_EQ(mem.activation_bytes, 8 * (NC + 3 * NC) * 2);  // input + each layer's input
  // Scratch + receive buffer + one layer rebuilt.
  EXPECT_EQ(mem.workspace_bytes, (15 * NC + 16 * 2048.0 + 16 * NC + 4 * 2048 + 16 * 2048.0) * 2);
  s.activation_storage = ActivationStorage::fp32;
  const StageMemory fp32 = stage_memory(m, {3, false, false}, 1, 8, s);
  EXPECT_EQ(fp32.activation_bytes, 2 * mem.activation_bytes);
  EXPECT_EQ(fp32.workspace_bytes, 2 * mem.workspace_bytes);
}

// bf16 storage, a middle stage of 3 layers, 8 micro-batches of 1 sequence
// (N = T = 2048, C = 2048, 16 heads). Per micro-batch: the input and the
// last layer's output in fp32, each layer's statistics in fp32 (4 per token
// and one log-sum-exp per head and token); in bf16 each layer's 16 NC
// tensors and the input, but not the last layer's output (only a head reads
// it back). Workspace: the fp32 one plus one layer's tensors and a second
// ln1 and output buffer.
TEST(MemoryModelByHand, Bf16StorageHalvesTheLayersTensors) {
  const ModelShape m = gpt3_xl_shape();
  MemorySettings s = runtime_without_reserve();
  const double NC = 2048.0 * 2048, statistics = 4 * 2048.0 + 16 * 2048.0;
  const StageMemory fp32 = stage_memory(m, {3, false, false}, 1, 8, s);
  EXPECT_EQ(fp32.activation_bytes, 8 * (NC + 3 * (16 * NC + statistics)) * 4);
  s.activation_storage = ActivationStorage::bf16;
  const StageMemory bf16 = stage_memory(m, {3, false, false}, 1, 8, s);
  EXPECT_EQ(bf16.activation_bytes, 8 * ((2 * NC + 3 * statistics) * 4 + (3 * 16 * NC + NC - NC) * 2));
  EXPECT_EQ(bf16.workspace_bytes, fp32.workspace_bytes + (16 * NC + 2 * NC) * 4);
  EXPECT_GT(fp32.activation_bytes / bf16.activation_bytes, 1.8);  // 1.88: the fp32 input and output remain
}

TEST(MemoryModelByHand, MostLayersWithinACapacity) {
  const ModelShape m = gpt3_xl_shape();
  const MemorySettings s = runtime_without_reserve();
  const double three = stage_memory(m, {3, false, false}, 1, 8, s).total_bytes();
  EXPECT_EQ(max_layers_within(m, false, false, 1, 8, s, three), 3);
  EXPECT_EQ(max_layers_within(m, false, false, 1, 8, s, three - 1), 2);
  EXPECT_EQ(max_layers_within(m, false, false, 1, 8, s, 1e6), -1);  // not even the scratch
  const double zero = stage_memory(m, {0, true, true}, 1, 8, s).total_bytes();
  EXPECT_EQ(max_layers_within(m, true, true, 1, 8, s, zero), 0);
}

TEST(MemoryModelByHand, ReserveIsPerDevice) {
  const ModelShape m = gpt3_xl_shape();
  MemorySettings s;
  const double with = stage_memory(m, {3, false, false}, 1, 8, s).total_bytes();
  EXPECT_EQ(with - stage_memory(m, {3, false, false}, 1, 8, runtime_without_reserve()).total_bytes(), 1 << 30);
}

}  // namespace
}  // namespace geotrain::plan
