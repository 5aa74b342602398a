// Tensor parallelism in the planner: the unit network (by hand), the memory
// of one rank and the simulator's all-reduces (by hand), and the layout
// search against an exhaustive enumeration over tp, pp, dp, micro-batch,
// devices (any subset, any placement) and layer split.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/plan/layout_search.hpp"
#include "geotrain/plan/memory_model.hpp"
#include "geotrain/plan/tensor_parallel.hpp"
#include "plan_test_support.hpp"

namespace geotrain::plan {
namespace {

struct Links {
  double node_gbps, node_ms;   // inside a node
  double site_gbps, site_ms;   // between nodes of a site
  double wan_gbps, wan_ms;     // between sites
};

// `sites` x `nodes` x `gpus`; device id = (site * nodes + node) * gpus + gpu;
// every device `tflops` and unlimited memory.
Network cluster(int sites, int nodes, int gpus, const Links& l, double tflops) {
  Network net;
  const int n = sites * nodes * gpus;
  net.device_count = n;
  net.device_types.push_back({"G", tflops, 0});
  for (int u = 0; u < n; ++u) {
    const int su = u / (nodes * gpus), nu = u / gpus;
    net.site_of_device.push_back("s" + std::to_string(su));
    net.node_of_device.push_back("n" + std::to_string(nu));
    net.type_of_device.push_back(0);
    for (int v = 0; v < n; ++v) {
      const int sv = v / (nodes * gpus), nv = v / gpus;
      const double gbps = nu == nv ? l.node_gbps : su == sv ? l.site_gbps : l.wan_gbps;
      const double ms = nu == nv ? l.node_ms : su == sv ? l.site_ms : l.wan_ms;
      net.latency_s.push_back(u == v ? 0.0 : ms / 1000);
      net.bandwidth_bytes_per_s.push_back(u == v ? INFINITY : gbps * kBytesPerGbit);
    }
  }
  return net;
}

TEST(TensorParallel, UnitNetworkByHand) {
  Links l{800, 0.005, 100, 0.1, 10, 20};
  Network net = cluster(2, 2, 2, l, 50);
  // Make one counterpart pair slower: device 1 -> 3 (member 1 of unit 0 -> member 1 of unit 1).
  net.bandwidth_bytes_per_s[1 * 8 + 3] = 40 * kBytesPerGbit;
  net.latency_s[1 * 8 + 3] = 0.3 / 1000;
  const auto groups = node_tensor_groups(net, 2);
  ASSERT_EQ(groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(node_tensor_groups(net, 1).size(), 8u);
  EXPECT_TRUE(node_tensor_groups(net, 4).empty());  // nodes of 2
  const TensorUnits u = tensor_units(net, groups, 125, 0, 0.9);
  ASSERT_EQ(u.network.device_count, 4);
  EXPECT_EQ(u.tensor_parallel, 2);
  // Speed: 2 x 50 x 0.9 = 90 TFLOPS, one type.
  ASSERT_EQ(u.network.device_types.size(), 1u);
  EXPECT_DOUBLE_EQ(u.network.device_types[0].tflops, 90.0);
  EXPECT_EQ(u.network.device_types[0].name, "G x2");
  // Unit 0 -> unit 1: the slower counterpart pair (1 -> 3); back: 100 Gbit/s, 0.1 ms.
  EXPECT_DOUBLE_EQ(u.network.bandwidth(0, 1), 40 * kBytesPerGbit);
  EXPECT_DOUBLE_EQ(u.network.latency(0, 1), 0.3 / 1000);
  EXPECT_DOUBLE_EQ(u.network.bandwidth(1, 0), 100 * kBytesPerGbit);
  EXPECT_DOUBLE_EQ(u.network.bandwidth(0, 2), 10 * kBytesPerGbit);
  EXPECT_DOUBLE_EQ(u.network.latency(2, 0), 20.0 / 1000);
  // The ring inside a node.
  EXPECT_DOUBLE_EQ(u.ring_bandwidth_bytes_per_s[3], 800 * kBytesPerGbit);
  EXPECT_DOUBLE_EQ(u.ring_latency_s[3], 0.005 / 1000);
  EXPECT_EQ(u.network.site(2), "s1");
  EXPECT_EQ(u.network.node(3), "n3");
  // Degrees: must divide heads (4) and hidden and fit a node (2).
  ModelShape m;
  m.heads = 4;
  m.hidden = 128;
  EXPECT_EQ(tensor_parallel_choices(net, m, {1, 2, 4, 8}), (std::vector<int>{1, 2}));
  m.heads = 3;
  m.hidden = 96;
  EXPECT_EQ(tensor_parallel_choices(net, m, {1, 2, 4, 8}), (std::vector<int>{1}));
  // Devices of two nodes cannot form a unit; subnetwork keeps the node labels.
  EXPECT_THROW(tensor_units(net, {{1, 2}}, 125, 0, 1), InputError);
  EXPECT_EQ(subnetwork(net, {5, 2}).node_of_device, (std::vector<std::string>{"n2", "n1"}));
}

TEST(TensorParallel, MemoryOfOneRankByHand) {
  // C = 128, V = 256, s = 128, NH = 4, one micro-batch of b = 1, t = 2, first stage of 2 layers.
  ModelShape m;  // tiny: 4 layers, 128 hidden, 4 heads, V 256, s 128
  MemorySettings s;
  s.tensor_parallel = 2;
  s.reserved_bytes = 0;
  const StageMemory mem = stage_memory(m, {2, true, false}, 1, 1, s);
  const double C = 128, N = 128, V = 256, T = 128;
  const double params = 2 * (12 * C * C / 2 + 7 * C / 2 + 6 * C) + (V / 2) * C + T * C;
  EXPECT_DOUBLE_EQ(mem.parameters, params);
  EXPECT_DOUBLE_EQ(mem.state_bytes, 16 * params);
  // Slot: input NC + 2 layers x (4NC + 12NC/2 + 4N + NH*T/2) values x 4 B + token ids 4N.
  const double slot = (N * C + 2 * (4 * N * C + 6 * N * C + 4 * N + 4 * T / 2)) * 4 + 4 * N;
  EXPECT_DOUBLE_EQ(mem.activation_bytes, slot);
  // Workspace: 2NC + 12NC/2 + NH*T/2 + NC receive buffer.
  EXPECT_DOUBLE_EQ(mem.workspace_bytes, (2 * N * C + 6 * N * C + 4 * T / 2 + N * C) * 4);
  // t = 1 is the model as before: 12C^2 + 13C per layer.
  s.tensor_parallel = 1;
  EXPECT_DOUBLE_EQ(stage_memory(m, {2, false, false}, 1, 1, s).parameters, 2 * (12 * C * C + 13 * C));
  EXPECT_DOUBLE_EQ(stage_parameters_per_rank(m, 2, true, false, 2), params);
}

TrainingShape tiny_shape(int layers, int hidden, int heads, int sequence, int vocabulary, int batch) {
  return TrainingShape(ModelShape{"tp-test", layers, hidden, heads, vocabulary, sequence}, double(batch) * sequence, 2, 4);
}

TEST(TensorParallel, SimulatorAllReducesByHand) {
  // One unit of 4, one stage, one replica, GPipe, 2 micro-batches of 1, no head, no recomputation.
  Links l{800, 0.002, 100, 0.1, 10, 20};
  const Network net = cluster(1, 1, 4, l, 100);
  SimulationConfig base;
  base.model = tiny_shape(3, 256, 4, 64, 512, 2);
  base.global_batch_sequences = 2;
  base.micro_batch_sequences = 1;
  base.micro_batches_per_flush = 2;
  base.recompute = false;
  base.lm_head = false;
  base.peak_tflops = 100;
  LayoutOptions options;
  options.tensor_efficiency = 0.8;
  const TensorProblem p = tensor_problem(net, base, options, 4);
  ASSERT_EQ(p.units.network.device_count, 1);
  Plan plan;
  plan.pipeline_stages = plan.data_parallel = 1;
  plan.stages = {{0}};
  SimulationConfig c = p.config;
  c.device_tflops = p.units.network.device_tflops(c.peak_tflops);
  const SimulationResult r = simulate(p.units.network, plan, c);
  // By hand: rate = 4 x 100e12 x 0.8 x 0.34; layer forward = 24 b s h^2 (1 + s/6h).
  const double h = 256, s = 64, rate = 4 * 100e12 * 0.8 * kCalibratedEfficiency;
  const double layer = 24 * s * h * h * (1 + s / (6 * h));
  const double alpha = 0.002e-3, beta = 800 * kBytesPerGbit, X = s * h * 2;  // b s h fp16 values
  auto allreduce = [&](double count, double bytes) { return 2 * 3 * (count * alpha + bytes / (4 * beta)); };
  const double forward = 3 * layer / rate + allreduce(2 * 3 + 1, (2 * 3 + 1) * X);  // + the embedding's
  const double backward = 2 * 3 * layer / rate + allreduce(2 * 3, 2 * 3 * X);
  EXPECT_NEAR(r.iteration_s, 2 * (forward + backward), 1e-12 * r.iteration_s);
}

// --- search against exhaustive enumeration -----------------------------------

struct Best {
  double iteration_s = std::numeric_limits<double>::infinity();
  int tp = 0, pp = 0, dp = 0, b = 0;
};

using testing::compositions;

// Every tp in `tps`, every pp x dp, every placement of units (any subset:
// devices of a node are interchangeable here, so placements are sequences of
// nodes, each node used at most as often as it has units), every micro-batch
// in {1, 2}, every layer split; 1F1B (one flush). Simulated as given.
Best exhaustive(const Network& net, const SimulationConfig& base, const LayoutOptions& options, const std::vector<int>& tps) {
  Best best;
  for (int t : tps) {
    const TensorProblem p = tensor_problem(net, base, options, t);
    const Network& un = p.units.network;
    SimulationConfig c = p.config;
    c.device_tflops = un.device_tflops(c.peak_tflops);
    std::map<std::string, std::vector<int>> units_of_node;
    for (int u = 0; u < un.device_count; ++u) units_of_node[un.node(u)].push_back(u);
    std::vector<std::vector<int>> nodes;
    for (auto& [name, units] : units_of_node) nodes.push_back(units);
    const int n = un.device_count, L = base.model.layers;
    for (int pp = 1; pp <= L; ++pp) {
      for (int dp = 1; pp * dp <= n; ++dp) {
        if (base.global_batch_sequences % dp != 0) continue;
        const int k = pp * dp;
        std::vector<int> used(nodes.size(), 0), sequence;
        std::function<void()> place = [&] {
          if (static_cast<int>(sequence.size()) == k) {
            Plan plan;
            plan.pipeline_stages = pp;
            plan.data_parallel = dp;
            std::vector<int> taken(nodes.size(), 0);
            for (int s = 0; s < pp; ++s) {
              plan.stages.emplace_back();
              for (int r = 0; r < dp; ++r) {
                const int node = sequence[s * dp + r];
                plan.stages.back().push_back(nodes[node][taken[node]++]);
              }
            }
            for (int b : {1, 2}) {
              if (base.global_batch_sequences % (dp * b) != 0) continue;
              std::vector<int> prefix;
              compositions(L, pp, prefix, [&](const std::vector<int>& layers) {
                SimulationConfig trial = c;
                trial.micro_batch_sequences = b;
                trial.micro_batches_per_flush = 0;
                trial.layers_per_stage = layers;
                const double time = simulate(un, plan, trial).iteration_s;
                if (time < best.iteration_s) best = {time, t, pp, dp, b};
              });
            }
            return;
          }
          for (size_t node = 0; node < nodes.size(); ++node) {
            if (used[node] == static_cast<int>(nodes[node].size())) continue;
            ++used[node];
            sequence.push_back(static_cast<int>(node));
            place();
            sequence.pop_back();
            --used[node];
          }
        };
        place();
      }
    }
  }
  return best;
}

SimulationConfig tp_model() {
  SimulationConfig c;
  c.model = tiny_shape(4, 512, 4, 256, 1024, 8);
  c.global_batch_sequences = 8;
  c.schedule = Schedule::one_f_one_b;
  c.dp_scheme = DataParallelScheme::direct;
  c.recompute = false;
  c.lm_head = true;
  c.peak_tflops = 10;
  return c;
}

LayoutOptions tp_options() {
  LayoutOptions o;
  o.micro_batch_choices = {1, 2};
  o.placement.candidates = 200;
  return o;
}

// Fast inside a node (NVLink-like), slow between nodes and sites.
const Links kGeo{2400, 0.002, 2, 0.5, 0.5, 30};

TEST(TensorParallel, SearchMatchesExhaustiveAndChoosesTensorParallel) {
  const Network net = cluster(2, 2, 2, kGeo, 2);
  const SimulationConfig base = tp_model();
  const LayoutOptions options = tp_options();
  const Layout found = search_layout(net, base, options);
  const Best best = exhaustive(net, base, options, {1, 2});
  SCOPED_TRACE("exhaustive best: tp " + std::to_string(best.tp) + " pp " + std::to_string(best.pp) + " dp " +
               std::to_string(best.dp) + " b " + std::to_string(best.b) + " " + std::to_string(best.iteration_s) +
               " s; search: tp " + std::to_string(found.plan.tensor_parallel) + " pp " +
               std::to_string(found.plan.pipeline_stages) + " dp " + std::to_string(found.plan.data_parallel) + " " +
               std::to_string(found.simulation.iteration_s) + " s");
  EXPECT_EQ(best.tp, 2);
  EXPECT_EQ(found.plan.tensor_parallel, 2);
  EXPECT_LE(found.simulation.iteration_s, best.iteration_s * 1.01);
  EXPECT_GE(found.simulation.iteration_s, best.iteration_s * (1 - 1e-9));
  // The plan's units are node-local pairs, idle devices are those of unused units.
  ASSERT_EQ(found.plan.tensor_groups.size(), 4u);
  std::vector<char> used(8, 0);
  for (const auto& stage : found.plan.stages) {
    for (int unit : stage) {
      const auto ranks = found.plan.ranks_of_unit(unit);
      ASSERT_EQ(ranks.size(), 2u);
      EXPECT_EQ(net.node(ranks[0]), net.node(ranks[1]));
      for (int d : ranks) used[d] = 1;
    }
  }
  for (int d : found.idle_devices) EXPECT_FALSE(used[d]);
  EXPECT_EQ(found.idle_devices.size() + 2u * found.plan.pipeline_stages * found.plan.data_parallel, 8u);
  // Without tensor parallelism (fixed tp 1) the best is slower.
  LayoutOptions no_tp = options;
  no_tp.tensor_parallel = 1;
  const Layout plain = search_layout(net, base, no_tp);
  EXPECT_EQ(plain.plan.tensor_parallel, 1);
  EXPECT_TRUE(plain.plan.tensor_groups.empty());
  const Best best_plain = exhaustive(net, base, options, {1});
  EXPECT_LE(plain.simulation.iteration_s, best_plain.iteration_s * 1.01);
  EXPECT_GT(plain.simulation.iteration_s, found.simulation.iteration_s);
}

TEST(TensorParallel, NotChosenWhenItsEfficiencyMakesItLose) {
  const Network net = cluster(2, 2, 2, kGeo, 2);
  const SimulationConfig base = tp_model();
  LayoutOptions options = tp_options();
  options.tensor_efficiency = 0.2;
  const Layout found = search_layout(net, base, options);
  const Best best = exhaustive(net, base, options, {1, 2});
  EXPECT_EQ(best.tp, 1);
  EXPECT_EQ(found.plan.tensor_parallel, 1);
  EXPECT_LE(found.simulation.iteration_s, best.iteration_s * 1.01);
  ASSERT_EQ(found.tensor_parallel_tried.size(), 2u);
  EXPECT_GT(found.tensor_parallel_tried[1].second, found.tensor_parallel_tried[0].second);
}

TEST(TensorParallel, NotChosenWhenTheNodeLinkIsSlow) {
  Links slow = kGeo;
  slow.node_gbps = 2;  // the node's link no faster than the site's
  const Network net = cluster(2, 2, 2, slow, 2);
  const Layout found = search_layout(net, tp_model(), tp_options());
  EXPECT_EQ(found.plan.tensor_parallel, 1);
}

TEST(TensorParallel, FixedDegreeIsKeptOrRefused) {
  const Network net = cluster(2, 2, 2, kGeo, 2);
  LayoutOptions options = tp_options();
  options.tensor_parallel = 2;
  const Layout found = search_layout(net, tp_model(), options);
  EXPECT_EQ(found.plan.tensor_parallel, 2);
  options.tensor_parallel = 4;  // nodes hold 2
  EXPECT_THROW(search_layout(net, tp_model(), options), LayoutError);
}

}  // namespace
}  // namespace geotrain::plan
