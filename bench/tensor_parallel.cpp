// Tensor parallelism in the layout search (analysis/results/planner.md,
// "Tensor parallelism"): 5 sites x 2 nodes x 4 A100-80GB (40 GPUs), NVLink
// inside a node, a cluster network between a site's nodes, the DT-FM
// world-wide measurements between sites; an OPT-350-like model, batch 1024.
// Two readings of the between-node bandwidths: per node, shared by its 4
// GPUs (inputs/scenarios/geo-a100-nodes.toml), and per device pair (every
// GPU pair has the whole bandwidth, the DT-FM scenarios' convention).
// search_layout's choice against an exhaustive search on the same simulator
// over tp in {1, 2, 4}, every non-empty subset of whole sites, every pp x dp
// that fits the subset's units (dp dividing the batch, pp <= layers), two
// structured placements of the subset's units in site order (pipelines
// inside a site, or stage groups inside a site; the first pp x dp units), each
// completed as the search completes a placement (best micro-batch in
// {1, 2, 4, 8}, stage order by simulation, layer split hill-climbed).
//
//   build/release/bench/bench_tensor_parallel [--candidates 1000] [--seed 1]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "geotrain/io/scenario.hpp"
#include "geotrain/plan/layout_search.hpp"

using namespace geotrain;

namespace {

constexpr int kSites = 5, kNodes = 2, kGpus = 4;
const char* kSiteNames[kSites] = {"Oregon", "Virginia", "Ohio", "London", "Frankfurt"};
// DT-FM reference §5.5 (world-wide table): one-way ms and Gbit/s.
const double kWanMs[kSites][kSites] = {
    {0, 67, 49, 136, 143}, {67, 0, 11, 76, 90}, {49, 11, 0, 86, 99}, {136, 76, 86, 0, 14}, {143, 90, 99, 14, 0}};
const double kWanGbps[kSites][kSites] = {{0, 0.79, 1.10, 0.42, 0.404},
                                         {0.79, 0, 1.12, 1.16, 1.02},
                                         {1.10, 1.12, 0, 1.05, 0.799},
                                         {0.42, 1.16, 1.05, 0, 1.14},
                                         {0.404, 1.02, 0.799, 1.14, 0}};
constexpr double kNvlinkGbps = 2400, kNvlinkMs = 0.005;  // 300 GB/s
constexpr double kSiteGbps = 100, kSiteMs = 0.05;       // between nodes of a site

plan::Network geo_network() {
  plan::Network net;
  const int n = kSites * kNodes * kGpus;
  net.device_count = n;
  net.device_types.push_back({"A100-80GB", 312, 80 * plan::kBytesPerGib});
  for (int u = 0; u < n; ++u) {
    const int su = u / (kNodes * kGpus), nu = u / kGpus;
    net.site_of_device.push_back(kSiteNames[su]);
    net.node_of_device.push_back(std::string(kSiteNames[su]) + "-" + std::to_string(nu % kNodes));
    net.type_of_device.push_back(0);
    for (int v = 0; v < n; ++v) {
      const int sv = v / (kNodes * kGpus), nv = v / kGpus;
      const double gbps = nu == nv ? kNvlinkGbps : su == sv ? kSiteGbps : kWanGbps[su][sv];
      const double ms = nu == nv ? kNvlinkMs : su == sv ? kSiteMs : kWanMs[su][sv];
      net.latency_s.push_back(u == v ? 0.0 : ms / 1000);
      net.bandwidth_bytes_per_s.push_back(u == v ? INFINITY : gbps * plan::kBytesPerGbit);
    }
  }
  return net;
}

// geotrain's runtime settings (as bench_layout): 1F1B, direct exchange in
// 25 MiB buckets, the tied head, no recomputation, fp32 activations kept.
plan::SimulationConfig opt350() {
  plan::SimulationConfig c;
  const ModelShape shape{"opt-350-like", 24, 1024, 16, 50272, 2048};
  c.model = plan::TrainingShape(shape, 1024.0 * 2048, 2, 4);
  c.global_batch_sequences = 1024;
  c.schedule = plan::Schedule::one_f_one_b;
  c.dp_scheme = plan::DataParallelScheme::direct;
  c.gradient_bucket_mb = 25;
  c.lm_head = true;
  c.recompute = false;
  return c;
}

struct Found {
  double iteration_s = INFINITY;
  int tp = 0, pp = 0, dp = 0, b = 0;
  std::string sites, placement;
};

std::string describe(const Found& f) {
  char text[256];
  std::snprintf(text, sizeof text, "%.3f s: tp %d, pp %d, dp %d, b %d, sites %s, %s", f.iteration_s, f.tp, f.pp, f.dp,
                f.b, f.sites.c_str(), f.placement.c_str());
  return text;
}

Found exhaustive(const plan::Network& net, const plan::SimulationConfig& base, const plan::LayoutOptions& options,
                 int t, long* evaluated) {
  Found best;
  const plan::TensorProblem problem = plan::tensor_problem(net, base, options, t);
  const plan::Network& un = problem.units.network;
  for (int mask = 1; mask < (1 << kSites); ++mask) {
    std::vector<int> units;  // in site order (ids are site-major)
    std::string sites;
    for (int s = 0; s < kSites; ++s) {
      if (mask & (1 << s)) sites += (sites.empty() ? "" : "+") + std::string(kSiteNames[s]);
    }
    for (int u = 0; u < un.device_count; ++u) {
      for (int s = 0; s < kSites; ++s) {
        if ((mask & (1 << s)) && un.site(u) == kSiteNames[s]) units.push_back(u);
      }
    }
    const int k = static_cast<int>(units.size());
    for (int dp = 1; dp <= k; ++dp) {
      if (base.global_batch_sequences % dp != 0) continue;
      for (int pp = 1; pp <= base.model.layers && pp * dp <= k; ++pp) {
        for (bool pipeline_contiguous : {true, false}) {
          plan::Plan p;
          p.pipeline_stages = pp;
          p.data_parallel = dp;
          p.stages.assign(pp, std::vector<int>(dp));
          for (int s = 0; s < pp; ++s) {
            for (int r = 0; r < dp; ++r) p.stages[s][r] = units[pipeline_contiguous ? r * pp + s : s * dp + r];
          }
          ++*evaluated;
          try {
            const plan::Layout l = plan::complete_layout(un, problem.config, p, problem.options);
            if (l.simulation.iteration_s < best.iteration_s) {
              best = {l.simulation.iteration_s, t, pp, dp, l.micro_batch_sequences, sites,
                      pipeline_contiguous ? "pipelines in a site" : "stage groups in a site"};
            }
          } catch (const plan::LayoutError&) {
          }
        }
      }
    }
  }
  return best;
}

void run(const char* title, const plan::Network& net, int candidates, unsigned long long seed) {
  const plan::SimulationConfig base = opt350();
  plan::LayoutOptions options;
  options.placement.candidates = candidates;
  options.placement.seed = seed;
  options.tensor_parallel_choices = {1, 2, 4};

  std::printf("## %s\n\n", title);
  const plan::Layout chosen = plan::search_layout(net, base, options);
  std::printf("search_layout: %.3f s: tp %d, pp %d, dp %d, b %d, %zu idle; planner %.1f s\n",
              chosen.simulation.iteration_s, chosen.plan.tensor_parallel, chosen.plan.pipeline_stages,
              chosen.plan.data_parallel, chosen.micro_batch_sequences, chosen.idle_devices.size(), chosen.seconds);
  for (auto [t, s] : chosen.tensor_parallel_tried) std::printf("  search, best with tp %d: %.3f s\n", t, s);
  std::fflush(stdout);

  Found overall;
  std::vector<Found> per_tp;
  long evaluated = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int t : {1, 2, 4}) {
    const Found f = exhaustive(net, base, options, t, &evaluated);
    per_tp.push_back(f);
    std::printf("exhaustive, tp %d: %s\n", t, describe(f).c_str());
    std::fflush(stdout);
    if (f.iteration_s < overall.iteration_s) overall = f;
  }
  const double exhaustive_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double best_tp = INFINITY;
  for (const Found& f : per_tp) {
    if (f.tp > 1) best_tp = std::min(best_tp, f.iteration_s);
  }
  std::printf("\n| | value |\n|---|---|\n");
  std::printf("| search_layout's choice | %.3f s: tp %d, pp %d, dp %d, b %d |\n", chosen.simulation.iteration_s,
              chosen.plan.tensor_parallel, chosen.plan.pipeline_stages, chosen.plan.data_parallel,
              chosen.micro_batch_sequences);
  std::printf("| exhaustive best | %s |\n", describe(overall).c_str());
  std::printf("| search_layout / exhaustive best | %.4f |\n", chosen.simulation.iteration_s / overall.iteration_s);
  std::printf("| best without TP / best with TP (exhaustive) | %.3f |\n", per_tp[0].iteration_s / best_tp);
  std::printf("| planner time | %.1f s |\n", chosen.seconds);
  std::printf("| exhaustive time | %.1f s (%ld placements completed) |\n\n", exhaustive_s, evaluated);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int candidates = 1000;
  unsigned long long seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--candidates")) candidates = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seed")) seed = std::strtoull(argv[i + 1], nullptr, 10);
  }
  std::printf("# 5 sites x 2 nodes x 4 A100-80GB, OPT-350-like (24 x 1024, 16 heads, s 2048, V 50272), batch 1024\n\n");
  io::WorkloadOverrides degrees;  // the file has no [workload]; the layout search ignores these
  degrees.pipeline_stages = 1;
  const io::Scenario scenario =
      io::load_scenario(std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/scenarios/geo-a100-nodes.toml", degrees);
  run("WAN per node, shared by its GPUs (inputs/scenarios/geo-a100-nodes.toml)", scenario.network, candidates, seed);
  run("WAN per device pair (every GPU pair the whole bandwidth)", geo_network(), candidates, seed);
  return 0;
}
