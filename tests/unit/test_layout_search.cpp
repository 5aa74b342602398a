// The layout search: its layer split against brute force, the uneven
// split's gain against the closed form, memory limits, idle devices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "geotrain/plan/layout_search.hpp"
#include "plan_test_support.hpp"

namespace geotrain::plan {
namespace {

// One site: every link `gbps` and `latency_ms`; device d has tflops[d]
// and `memory_gib` (types named by their speed).
Network single_site(const std::vector<double>& tflops, double memory_gib, double gbps = 100, double latency_ms = 0.01) {
  Network net;
  const int n = static_cast<int>(tflops.size());
  net.device_count = n;
  for (int u = 0; u < n; ++u) {
    for (int v = 0; v < n; ++v) {
      net.latency_s.push_back(u == v ? 0.0 : latency_ms / 1000);
      net.bandwidth_bytes_per_s.push_back(u == v ? INFINITY : gbps * kBytesPerGbit);
    }
    auto known = std::find_if(net.device_types.begin(), net.device_types.end(),
                              [&](const DeviceType& t) { return t.tflops == tflops[u]; });
    if (known == net.device_types.end()) {
      net.device_types.push_back({"T" + std::to_string(static_cast<int>(tflops[u])), tflops[u], memory_gib * kBytesPerGib});
      known = net.device_types.end() - 1;
    }
    net.type_of_device.push_back(static_cast<int>(known - net.device_types.begin()));
  }
  return net;
}

SimulationConfig small_model(int layers, int batch) {
  SimulationConfig c;
  c.model = TrainingShape(ModelShape{"test", layers, 1024, 16, 50257, 1024}, batch * 1024.0, 2, 4);
  c.global_batch_sequences = batch;
  c.micro_batch_sequences = 1;
  c.schedule = Schedule::one_f_one_b;
  c.dp_scheme = DataParallelScheme::direct;
  return c;
}

LayoutOptions fixed(int pp, int dp, int micro_batch = 1) {
  LayoutOptions o;
  o.pipeline_stages = pp;
  o.data_parallel = dp;
  o.micro_batch_sequences = micro_batch;
  o.placement.candidates = 200;
  return o;
}

using testing::compositions;

// The best iteration over every device order (stage s of replica r is
// order[s * dp + r]) and every contiguous split.
double brute_force_best(const Network& net, SimulationConfig c, int pp, int dp) {
  c.device_tflops = net.device_tflops(c.peak_tflops);
  std::vector<int> order(net.device_count);
  std::iota(order.begin(), order.end(), 0);
  double best = INFINITY;
  do {
    Plan plan;
    plan.pipeline_stages = pp;
    plan.data_parallel = dp;
    for (int s = 0; s < pp; ++s) plan.stages.emplace_back(order.begin() + s * dp, order.begin() + (s + 1) * dp);
    std::vector<int> prefix;
    compositions(c.model.layers, pp, prefix, [&](const std::vector<int>& layers) {
      c.layers_per_stage = layers;
      best = std::min(best, simulate(net, plan, c).iteration_s);
    });
  } while (std::next_permutation(order.begin(), order.end()));
  return best;
}

TEST(LayoutSearch, SplitEqualsBruteForceOnOneFastSiteOneReplica) {
  const Network net = single_site({312, 125, 200, 90}, 1000);
  const SimulationConfig c = small_model(12, 16);
  const Layout layout = search_layout(net, c, fixed(4, 1));
  const double brute = brute_force_best(net, c, 4, 1);
  EXPECT_LE(layout.simulation.iteration_s, brute * 1.01) << "brute force " << brute;
  EXPECT_GE(layout.simulation.iteration_s, brute * (1 - 1e-12));
}

TEST(LayoutSearch, SplitEqualsBruteForceOnOneFastSiteTwoReplicas) {
  const Network net = single_site({312, 125, 312, 200, 125, 200}, 1000);
  const SimulationConfig c = small_model(9, 16);
  const Layout layout = search_layout(net, c, fixed(3, 2));
  const double brute = brute_force_best(net, c, 3, 2);
  EXPECT_LE(layout.simulation.iteration_s, brute * 1.01) << "brute force " << brute;
}

// GPipe with (almost) free links: the iteration is the closed form
// sum_s (f_s + b_s) + (m - 1) max_s (f_s + b_s) of the stages' times.
double gpipe_closed_form(const std::vector<double>& stage_s, int m) {
  return std::accumulate(stage_s.begin(), stage_s.end(), 0.0) +
         (m - 1) * *std::max_element(stage_s.begin(), stage_s.end());
}

TEST(LayoutSearch, UnevenSplitBeatsEvenOnMixedA100V100ByTheClosedForm) {
  const Network net = single_site({312, 312, 125, 125}, 1000, 1e6, 0);
  SimulationConfig c = small_model(24, 32);
  c.schedule = Schedule::gpipe;
  LayoutOptions o = fixed(4, 1);
  o.micro_batches_per_flush = 32;
  const Layout planned = search_layout(net, c, o);
  o.even_split = true;
  const Layout even = complete_layout(net, c, planned.plan, o);
  // Per layer, fwd + bwd with recomputation = 4 forward passes.
  const double layer_flops = 4 * layer_forward_flops(c.model, 1);
  auto stage_times = [&](const Layout& l) {
    std::vector<double> t;
    for (int s = 0; s < 4; ++s) {
      const double tflops = net.device_type(l.plan.stages[s][0])->tflops;
      t.push_back(l.layers_per_stage[s] * layer_flops / (tflops * 1e12 * c.efficiency));
    }
    return t;
  };
  for (int s = 0; s < 4; ++s) {  // 24 layers at 312 : 125: 9 + 9 on the A100s, 3 + 3 on the V100s
    EXPECT_EQ(planned.layers_per_stage[s], net.device_type(planned.plan.stages[s][0])->tflops == 312 ? 9 : 3);
  }
  EXPECT_EQ(even.layers_per_stage, (std::vector<int>{6, 6, 6, 6}));
  const double expected_planned = gpipe_closed_form(stage_times(planned), 32);
  const double expected_even = gpipe_closed_form(stage_times(even), 32);
  EXPECT_NEAR(planned.simulation.iteration_s / expected_planned, 1.0, 1e-3);
  EXPECT_NEAR(even.simulation.iteration_s / expected_even, 1.0, 1e-3);
  // (6 * 4 * 125^-1 ... ): 1.58x here, the V100 stage's 6 layers against an A100's 9.
  EXPECT_NEAR(even.simulation.iteration_s / planned.simulation.iteration_s, expected_even / expected_planned, 2e-3);
  EXPECT_GT(expected_even / expected_planned, 1.5);
}

TEST(LayoutSearch, NeverChoosesALayoutThatDoesNotFit) {
  // Fast devices with little memory (that of a first stage of 4 layers): the
  // balanced split does not fit; at most what max_layers_within allows at
  // each position does. (A middle stage of 4 layers, once the capacity,
  // holds no stage with the embedding or the head since the attention's
  // T x T matrix left the memory model, and then nothing fits.)
  SimulationConfig c = small_model(24, 16);
  LayoutOptions o = fixed(4, 1);
  o.memory.reserved_bytes = 0;
  const int slots = activation_slots(c.schedule, 16, 4);
  const double four = stage_memory(c.model, {4, true, false}, 1, slots, o.memory).total_bytes();
  Network net = single_site({312, 312, 125, 125}, 1000);
  net.device_types[0].memory_bytes = four;
  const Layout unconstrained = search_layout(single_site({312, 312, 125, 125}, 1000), c, o);
  const Layout layout = search_layout(net, c, o);
  for (int s = 0; s < 4; ++s) {
    EXPECT_LE(layout.memory_bytes_per_stage[s], layout.capacity_bytes_per_stage[s]) << s;
    if (net.device_type(layout.plan.stages[s][0])->tflops == 312) {
      EXPECT_LE(layout.layers_per_stage[s], max_layers_within(c.model, s == 0, s == 3, 1, slots, o.memory, four)) << s;
    }
  }
  EXPECT_GT(*std::max_element(unconstrained.layers_per_stage.begin(), unconstrained.layers_per_stage.end()),
            max_layers_within(c.model, false, false, 1, slots, o.memory, four));
  EXPECT_GT(layout.simulation.iteration_s, unconstrained.simulation.iteration_s);
}

TEST(LayoutSearch, FreeSearchRespectsMemoryEverywhere) {
  const Network net = single_site({312, 312, 312, 312, 125, 125, 125, 125}, 16, 10, 1);
  SimulationConfig c = small_model(24, 64);
  LayoutOptions o;
  o.placement.candidates = 200;
  const Layout layout = search_layout(net, c, o);
  ASSERT_FALSE(layout.candidates.empty());
  for (int s = 0; s < layout.plan.pipeline_stages; ++s) {
    EXPECT_LE(layout.memory_bytes_per_stage[s], layout.capacity_bytes_per_stage[s]);
  }
  EXPECT_LE(layout.plan.pipeline_stages * layout.plan.data_parallel, 8);
  EXPECT_EQ(std::accumulate(layout.layers_per_stage.begin(), layout.layers_per_stage.end(), 0), 24);
}

TEST(LayoutSearch, ImpossibleModelIsAClearError) {
  const Network net = single_site({312, 312}, 1);
  SimulationConfig c = small_model(24, 16);
  c.model = TrainingShape(gpt3_xl_shape(), 16 * 2048.0, 2, 4);
  try {
    search_layout(net, c, LayoutOptions{});
    ADD_FAILURE() << "no LayoutError";
  } catch (const LayoutError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("no layout fits in device memory"), std::string::npos) << message;
    EXPECT_NE(message.find("the largest device has 1.00 GiB"), std::string::npos) << message;
  }
}

TEST(LayoutSearch, LeavesAVerySlowDeviceIdle) {
  const Network net = single_site({312, 312, 312, 312, 2}, 1000);
  LayoutOptions o;
  o.placement.candidates = 200;
  const Layout layout = search_layout(net, small_model(12, 32), o);
  EXPECT_EQ(layout.idle_devices, std::vector<int>{4});
}

}  // namespace
}  // namespace geotrain::plan
