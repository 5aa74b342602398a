// Layout search benchmark (issue 18): mixed A100/V100 over the paper's
// regional and world-wide networks, the planned layout against the
// compute-oblivious DT-FM plan and against the even split; then the
// planner's time on 1,024 (and more) mixed devices.
//
//   build/release/bench/bench_layout [--candidates 1000] [--seed 1] [--scale-max 1024]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "geotrain/io/scenario.hpp"
#include "geotrain/plan/layout_search.hpp"
#include "eight_cities.hpp"

using namespace geotrain;

namespace {

struct Setting {
  const char* name;
  plan::SimulationConfig config;
  plan::LayoutOptions options;
  int dtfm_flush;  // the DT-FM plan's flush (its runs: 64); 0: one flush
};

// geotrain's runtime (simulate --system geotrain, plan --layout auto's
// defaults): 1F1B, its direct exchange in 25 MiB buckets, the tied head
// (logits and the first-last swap), fp32 activations kept.
Setting runtime_setting() {
  Setting s{"runtime", {}, {}, 0};
  s.config.schedule = plan::Schedule::one_f_one_b;
  s.config.dp_scheme = plan::DataParallelScheme::direct;
  s.config.gradient_bucket_mb = 25;
  s.config.lm_head = true;
  s.config.recompute = false;
  return s;
}

// DT-FM's runs: GPipe in flushes of 64, recomputation, fp16 activations,
// the paper's DP exchange.
Setting dtfm_setting() {
  Setting s{"DT-FM", {}, {}, 64};
  s.config.schedule = plan::Schedule::gpipe;
  s.config.dp_scheme = plan::DataParallelScheme::paper;
  s.config.recompute = true;
  s.options.memory.recompute = true;
  s.options.memory.activation_storage = ActivationStorage::bf16;  // 16-bit values, as fp16
  return s;
}

// A search's layout, or none where nothing fits (LayoutError).
template <class Search>
std::optional<plan::Layout> try_layout(Search search) {
  try {
    return search();
  } catch (const plan::LayoutError&) {
    return std::nullopt;
  }
}

std::string seconds(const std::optional<plan::Layout>& l) {
  if (!l) return "no fit";
  char text[64];
  std::snprintf(text, sizeof text, "%.3f%s", l->simulation.iteration_s, l->fits() ? "" : " (no fit)");
  return text;
}

std::string layers(const std::optional<plan::Layout>& l) {
  std::string text;
  for (int x : l ? l->layers_per_stage : std::vector<int>{}) {
    if (!text.empty()) text += ' ';
    text += std::to_string(x);
  }
  return text;
}

void mixed_row(const char* file, Setting s, int candidates, unsigned long long seed) {
  const io::Scenario scenario = io::load_scenario(std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/scenarios/" + file);
  s.config.model = scenario.workload.model;
  s.options.placement.seed = seed;
  s.options.placement.candidates = candidates;
  // The compute-oblivious DT-FM plan: the cost model's best 8 x 8, even split, micro-batch 1.
  plan::SearchOptions search;
  search.seed = seed;
  search.candidates = candidates;
  const plan::Plan dtfm = plan::search_plan(plan::CostModel(scenario.network, scenario.workload), search).plan;
  plan::SimulationConfig even = s.config;
  even.micro_batches_per_flush = s.dtfm_flush;
  const plan::Layout baseline = plan::evaluate_layout(scenario.network, even, dtfm, s.options);
  const auto dtfm_split = try_layout([&] { return plan::complete_layout(scenario.network, s.config, dtfm, s.options); });
  plan::LayoutOptions at_8x8 = s.options;
  at_8x8.pipeline_stages = at_8x8.data_parallel = 8;
  const auto planned_8x8 = try_layout([&] { return plan::search_layout(scenario.network, s.config, at_8x8); });
  const plan::Layout planned = plan::search_layout(scenario.network, s.config, s.options);
  plan::SimulationConfig even_of_planned = planned.config;
  even_of_planned.layers_per_stage.clear();
  const plan::Layout planned_even = plan::evaluate_layout(scenario.network, even_of_planned, planned.plan, s.options);
  std::printf("| %s | %s | %s | %s | %s [%s] | %s | %s | %d x %d, b %d, idle %zu, layers %s | %.2fx | %.2fx | %.1f |\n",
              scenario.name.c_str(), s.name, seconds(baseline).c_str(), seconds(dtfm_split).c_str(),
              seconds(planned_8x8).c_str(), layers(planned_8x8).c_str(), seconds(planned_even).c_str(),
              seconds(planned).c_str(), planned.plan.pipeline_stages, planned.plan.data_parallel,
              planned.micro_batch_sequences, planned.idle_devices.size(), layers(planned).c_str(),
              baseline.simulation.iteration_s / planned.simulation.iteration_s,
              planned_even.simulation.iteration_s / planned.simulation.iteration_s, planned.seconds);
  std::fflush(stdout);
}

// The 8 cities of world-wide.toml with n/8 devices each; A100-40 in
// every other city, V100-16 in the rest.
plan::Network mixed_world(const io::Scenario& world, int n) {
  plan::Network net = bench::eight_city_world(world, n);
  net.device_types = {{"A100-40", 312.0, 40.0 * plan::kBytesPerGib}, {"V100-16", 125.0, 16.0 * plan::kBytesPerGib}};
  for (int i = 0; i < n; ++i) net.type_of_device.push_back(bench::city_of_device(i, n) % 2);
  return net;
}

void scale_rows(int candidates, unsigned long long seed, int max_devices) {
  const io::Scenario world = io::load_scenario(std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/scenarios/world-wide.toml");
  std::printf("\n| devices | fixed | chosen | layers | iteration (s) | planner time (s) |\n|---|---|---|---|---|---|\n");
  for (int n = 1024; n <= max_devices; n *= 4) {
    const plan::Network net = mixed_world(world, n);
    for (int fixed_pp : {0, 2}) {
      Setting s = dtfm_setting();  // recomputation: pp 2 then fits on the V100s too
      s.config.global_batch_sequences = n;  // every device gets a sequence even at dp = n
      s.options.placement.seed = seed;
      s.options.placement.candidates = candidates;
      if (fixed_pp) s.options.pipeline_stages = fixed_pp, s.options.data_parallel = n / fixed_pp;
      const plan::Layout l = plan::search_layout(net, s.config, s.options);
      std::printf("| %d | %s | %d x %d (idle %zu) | %s | %.3f | %.1f |\n", n,
                  fixed_pp ? ("pp 2 x dp " + std::to_string(n / 2)).c_str() : "-", l.plan.pipeline_stages,
                  l.plan.data_parallel, l.idle_devices.size(), layers(l).c_str(), l.simulation.iteration_s, l.seconds);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int candidates = 1000, scale_max = 1024;
  unsigned long long seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--candidates")) candidates = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seed")) seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--scale-max")) scale_max = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "bench_layout: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  std::printf("Layout search, GPT3-XL, batch 1024 (%d placement candidates, seed %llu, one thread)\n\n", candidates, seed);
  std::printf("| scenario | setting | DT-FM plan, even split (s) | DT-FM placement, planned split | planned at 8 x 8 [layers] | "
              "planned layout, even split | planned layout (s) | chosen | vs DT-FM | vs even | planner (s) |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const char* file : {"regional-mixed.toml", "world-wide-mixed.toml"}) {
    mixed_row(file, runtime_setting(), candidates, seed);
    mixed_row(file, dtfm_setting(), candidates, seed);
  }
  scale_rows(candidates, seed, scale_max);
  return 0;
}
