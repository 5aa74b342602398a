// Planner benchmark: the five paper scenarios against the original scheduler's
// published runs (reference §7) and our reimplementation of its algorithm in
// the same run, then growth with N on world-wide-like networks.
//
//   build/release/bench/bench_planner [--candidates 5000] [--seed 1] [--paper 1]
//                                     [--scaling-min 64] [--scaling-max 1024]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "geotrain/io/scenario.hpp"
#include "geotrain/plan/search.hpp"
#include "eight_cities.hpp"

using namespace geotrain;

namespace {

struct Published {
  const char* name;
  double runtime_s, best_cost;
};
// Reference §7: original Python scheduler, one core, 5,000 candidates.
const Published kPublished[] = {{"on-demand", 388, 3.440},
                                {"spot", 329, 49.504},
                                {"multi-dc", 292, 16.087},
                                {"regional", 375, 34.802},
                                {"world-wide", 257, 49.218}};

double cost_of(const plan::CostModel& model, const plan::Assignment& a) {
  return plan::literal_plan(model, a).cost.total_s();
}

void paper_table(int candidates, unsigned long long seed) {
  std::printf("| scenario | ours cost | ours time (s) | original best | original time (s) | speed-up | "
              "paper algorithm here: cost | time (s) | ours, random start: cost | time (s) | "
              "rank order (Megatron) | random best of 5000 | lower bound |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Published& p : kPublished) {
    const io::Scenario s = io::load_scenario(std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/scenarios/" + p.name + ".toml");
    const plan::CostModel model(s.network, s.workload);
    plan::SearchOptions ours;
    ours.seed = seed;
    ours.candidates = candidates;
    const plan::SearchResult best = plan::search_plan(model, ours);
    plan::SearchOptions original = plan::SearchOptions::paper_configuration(seed);
    original.candidates = candidates;
    const plan::SearchResult paper = plan::search_plan(model, original);
    plan::SearchOptions unseeded = ours;
    unseeded.structured_seeds = false;
    const plan::SearchResult random_start = plan::search_plan(model, unseeded);
    const double rank_order = cost_of(model, plan::megatron_rank_order(8, 8));
    const double random = plan::random_best(model, 5000, seed).plan.cost.total_s();
    std::printf("| %s | %.5f | %.3f | %.3f | %.0f | %.0fx | %.5f | %.3f | %.5f | %.3f | %.5f | %.5f | %.5f |\n",
                p.name, best.plan.cost.total_s(), best.seconds, p.best_cost, p.runtime_s,
                p.runtime_s / best.seconds, paper.plan.cost.total_s(), paper.seconds,
                random_start.plan.cost.total_s(), random_start.seconds, rank_order, random,
                plan::cost_lower_bound(model));
    std::fflush(stdout);
  }
}

// World-wide-like network of n devices: the 8 cities of reference §5.5,
// n/8 devices per city, workload with the original's constants.
plan::CostModel world_wide_like(const io::Scenario& world, int pp, int dp) {
  return plan::CostModel(bench::eight_city_world(world, pp * dp), plan::dtfm_original_workload(pp, dp));
}

void scaling_table(int candidates, unsigned long long seed, int min_devices, int max_devices) {
  const io::Scenario world =
      io::load_scenario(std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/scenarios/world-wide.toml");
  std::printf("\n| devices | stages x replicas | ours cost | planner time (s) | rank order (Megatron) | "
              "DT-FM rank order | lower bound |\n|---|---|---|---|---|---|---|\n");
  const int shapes[][2] = {{8, 8}, {8, 16}, {16, 16}, {16, 32}, {16, 64}};
  for (const auto& shape : shapes) {
    const int pp = shape[0], dp = shape[1];
    if (pp * dp > max_devices) break;
    if (pp * dp < min_devices) continue;
    const plan::CostModel model = world_wide_like(world, pp, dp);
    plan::SearchOptions ours;
    ours.seed = seed;
    ours.candidates = candidates;
    const plan::SearchResult best = plan::search_plan(model, ours);
    std::printf("| %d | %d x %d | %.4f | %.2f | %.4f | %.4f | %.4f |\n", pp * dp, pp, dp, best.plan.cost.total_s(),
                best.seconds, cost_of(model, plan::megatron_rank_order(pp, dp)),
                cost_of(model, plan::dtfm_rank_order(pp, dp)), plan::cost_lower_bound(model));
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int candidates = 5000, scaling_min = 64, scaling_max = 1024;
  bool paper = true;
  unsigned long long seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--candidates")) candidates = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seed")) seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--scaling-max")) scaling_max = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--scaling-min")) scaling_min = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--paper")) paper = std::atoi(argv[i + 1]) != 0;
    else {
      std::fprintf(stderr, "bench_planner: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  std::printf("Planner on the paper's five scenarios (%d candidates, seed %llu, one thread)\n\n", candidates, seed);
  if (paper) paper_table(candidates, seed);
  scaling_table(candidates, seed, scaling_min, scaling_max);
  return 0;
}
