// Which degrees, which devices, which placements (src/plan/README.md,
// "Layout search"): every (pp, dp, micro-batch) is screened with two cheap
// structured placements and the balanced split; the best few (pp, dp) then
// get the DT-FM placement search, a type-aware variant of it and a layer
// split refined by simulation.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>

#include "layout_internal.hpp"

namespace geotrain::plan {
namespace layout {
namespace {

// Devices in the order they are left idle last: fastest first; among
// equals the best connected (total bandwidth to the others), then by id.
std::vector<int> fastest_first(const Context& ctx) {
  const int n = ctx.net.device_count;
  std::vector<double> connectivity(n, 0.0);
  for (int u = 0; u < n; ++u) {
    for (int v = 0; v < n; ++v) {
      if (u != v) connectivity[u] += std::min(ctx.net.bandwidth(u, v), ctx.net.bandwidth(v, u));
    }
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  const auto& speed = ctx.base.device_tflops;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (speed[a] != speed[b]) return speed[a] > speed[b];
    return connectivity[a] > connectivity[b];
  });
  return order;
}

struct Degrees {
  int pp, dp;
  bool operator<(const Degrees& o) const { return pp != o.pp ? pp < o.pp : dp < o.dp; }
};

// Device counts worth using: all, or only the fastest speed classes (a
// slow class may cost more than it adds).
std::vector<int> used_counts(const Context& ctx, const std::vector<int>& order) {
  std::vector<int> counts;
  for (size_t i = 1; i < order.size(); ++i) {
    if (ctx.base.device_tflops[order[i]] != ctx.base.device_tflops[order[i - 1]]) counts.push_back(static_cast<int>(i));
  }
  counts.push_back(static_cast<int>(order.size()));
  return counts;
}

// For each count K and each dp dividing the batch: pp = min(L, K / dp) and
// every smaller pp that uses at most placement_search_max_devices devices
// (on slow links fewer, better connected devices can win: a pair uses the
// first pp x dp devices of the order; the bound keeps thousands of devices
// from multiplying the screening), or the user's fixed values.
std::vector<Degrees> candidate_degrees(const Context& ctx, const std::vector<int>& order) {
  const LayoutOptions& o = ctx.options;
  const int L = ctx.base.model.layers, B = ctx.base.global_batch_sequences;
  std::set<Degrees> pairs;
  for (int K : used_counts(ctx, order)) {
    for (int dp = 1; dp <= K; ++dp) {
      if (B % dp != 0 || (o.data_parallel && dp != *o.data_parallel)) continue;
      const int most = std::min(L, K / dp);
      for (int pp = o.pipeline_stages ? *o.pipeline_stages : 1; pp <= (o.pipeline_stages ? *o.pipeline_stages : most); ++pp) {
        const bool small = static_cast<long>(pp) * dp <= o.placement_search_max_devices;
        if (!o.pipeline_stages && pp != most && !small) continue;
        if (pp >= 1 && pp <= L && static_cast<long>(pp) * dp <= K) pairs.insert({pp, dp});
      }
    }
  }
  return {pairs.begin(), pairs.end()};
}

Workload workload_for(const Context& ctx, int pp, int dp) {
  TrainingShape shape = ctx.base.model;
  shape.tokens_per_step = static_cast<double>(ctx.base.global_batch_sequences) * shape.sequence_length;
  return workload_from_model(shape, pp, dp);
}

Plan to_global(Plan plan, const std::vector<int>& devices) {
  for (auto& group : plan.stages) {
    for (int& d : group) d = devices[d];
  }
  return plan;
}

// `devices` (global ids) split into speed classes, fastest first, each in
// site order (sites by first appearance), as indices into `devices`.
std::vector<std::vector<int>> speed_classes(const Context& ctx, const std::vector<int>& devices) {
  std::map<std::string, int> site_rank;
  for (int d : devices) site_rank.emplace(ctx.net.site(d), static_cast<int>(site_rank.size()));
  std::vector<int> local(devices.size());
  std::iota(local.begin(), local.end(), 0);
  const auto& speed = ctx.base.device_tflops;
  std::stable_sort(local.begin(), local.end(), [&](int a, int b) {
    const int da = devices[a], db = devices[b];
    if (speed[da] != speed[db]) return speed[da] > speed[db];
    return site_rank[ctx.net.site(da)] < site_rank[ctx.net.site(db)];
  });
  std::vector<std::vector<int>> classes;
  for (size_t i = 0; i < local.size(); ++i) {
    if (i == 0 || speed[devices[local[i]]] != speed[devices[local[i - 1]]]) classes.emplace_back();
    classes.back().push_back(local[i]);
  }
  return classes;
}

// Each class gives floor(n / dp) type-pure groups, the rest is pooled:
// pipeline-contiguous (DT-FM's rank order inside the class: a replica's
// consecutive stages share a site) or stage-contiguous (a group inside a site).
std::vector<std::vector<int>> pure_parts(const std::vector<std::vector<int>>& classes, int dp) {
  std::vector<std::vector<int>> parts;
  std::vector<int> pool;
  for (const auto& c : classes) {
    const size_t pure = c.size() / dp * dp;
    if (pure > 0) parts.emplace_back(c.begin(), c.begin() + pure);
    pool.insert(pool.end(), c.begin() + pure, c.end());
  }
  if (!pool.empty()) parts.push_back(pool);
  return parts;
}

Assignment structured_assignment(const std::vector<std::vector<int>>& parts, int dp, bool pipeline_contiguous) {
  Assignment assignment;
  for (const auto& part : parts) {
    const int groups = static_cast<int>(part.size()) / dp;
    for (int g = 0; g < groups; ++g) {
      for (int r = 0; r < dp; ++r) assignment.push_back(part[pipeline_contiguous ? g + groups * r : g * dp + r]);
    }
  }
  return assignment;
}

// The DT-FM search inside each type-pure part, its groups then ordered and
// matched by the cost model over all devices.
Assignment typed_search_assignment(const Context& ctx, const Network& sub, const std::vector<std::vector<int>>& parts,
                                   int dp) {
  Assignment assignment;
  for (const auto& part : parts) {
    const int groups = static_cast<int>(part.size()) / dp;
    if (groups == 1) {
      assignment.insert(assignment.end(), part.begin(), part.end());
      continue;
    }
    const CostModel model(subnetwork(sub, part), workload_for(ctx, groups, dp));
    const Plan inner = search_plan(model, ctx.options.placement).plan;
    for (const auto& group : inner.stages) {
      for (int d : group) assignment.push_back(part[d]);
    }
  }
  return assignment;
}

struct Candidate {
  std::string source;
  Plan plan;  // global ids
};

std::vector<Candidate> placements(const Context& ctx, const std::vector<int>& devices, int pp, int dp, bool full) {
  const Network sub = subnetwork(ctx.net, devices);
  const CostModel model(sub, workload_for(ctx, pp, dp));
  const auto parts = pure_parts(speed_classes(ctx, devices), dp);
  std::vector<Candidate> out;
  out.push_back({"pipeline-contiguous", to_global(complete_plan(model, structured_assignment(parts, dp, true)), devices)});
  out.push_back({"stage-contiguous", to_global(complete_plan(model, structured_assignment(parts, dp, false)), devices)});
  if (!full || pp * dp > ctx.options.placement_search_max_devices) return out;
  out.push_back({"dtfm-search", to_global(search_plan(model, ctx.options.placement).plan, devices)});
  if (parts.size() > 1) {
    out.push_back({"typed-search", to_global(complete_plan(model, typed_search_assignment(ctx, sub, parts, dp)), devices)});
  }
  return out;
}

struct Placed {
  Plan plan;
  Split split;
};

// The best micro-batch for a placement (screened); then, refining, its
// stage order and its split by simulation.
Placed best_over_micro_batches(const Context& ctx, const Plan& plan, bool refine) {
  Placed best{plan, {}};
  for (int b : micro_batch_choices(ctx, plan.data_parallel)) {
    const Split split = best_split(ctx, plan, b, false);
    if (split.iteration_s < best.split.iteration_s) best.split = split;
  }
  if (!best.split.fits || !refine) return best;
  const int b = best.split.micro_batch;
  for (const Plan& ordered : stage_orders(ctx, plan, b, best.split.flush, 3)) {
    const Split split = best_split(ctx, ordered, b, true);
    if (split.iteration_s < best.split.iteration_s * (1 - 1e-12) || !best.split.fits) best = {ordered, split};
  }
  return best;
}

// The cost model's view of the final placement, as it runs (its matchings
// and order may come from the simulator's refinement, so score it literally).
void rescore(const Context& ctx, Plan& plan) {
  std::vector<int> devices;
  for (const auto& group : plan.stages) devices.insert(devices.end(), group.begin(), group.end());
  Assignment local(devices.size());
  std::iota(local.begin(), local.end(), 0);
  const CostModel model(subnetwork(ctx.net, devices), workload_for(ctx, plan.pipeline_stages, plan.data_parallel));
  const Plan scored = literal_plan(model, local);
  plan.cost = scored.cost;
  plan.boundary_s = scored.boundary_s;
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", bytes / kBytesPerGib);
  return text;
}

// Why nothing fits: the smallest stage the most stages allow, against the
// largest device.
[[noreturn]] void fail_memory(const Context& ctx, const std::vector<Degrees>& tried) {
  int pp = 1;
  for (const Degrees& d : tried) pp = std::max(pp, d.pp);
  const ModelShape& m = ctx.base.model;
  const int layers = (m.layers + pp - 1) / pp, b = 1;
  const int slots = activation_slots(ctx.base.schedule, ctx.base.schedule == Schedule::gpipe ? 1 : pp, pp);
  const double need = stage_memory(m, {layers, pp == 1, pp == 1}, b, slots, ctx.options.memory).total_bytes();
  const double largest = *std::max_element(ctx.memory.begin(), ctx.memory.end());
  throw LayoutError("no layout fits in device memory: with " + std::to_string(pp) + " pipeline stages and micro-batch " +
                    std::to_string(b) + ", a stage of " + std::to_string(layers) + " layers of " + m.name + " needs " +
                    gib(need) + " GiB per device, the largest device has " + gib(largest) +
                    " GiB (memory model: src/plan/README.md, Layout search)");
}

}  // namespace
}  // namespace layout

namespace layout {
namespace {
Layout search_devices(const Network& net, const SimulationConfig& base, const LayoutOptions& options);
}  // namespace
}  // namespace layout

TensorProblem tensor_problem(const Network& net, const SimulationConfig& base, const LayoutOptions& options, int t) {
  TensorProblem problem{{}, base, options};
  if (t <= 1) {
    problem.units.network = net;
    return problem;
  }
  problem.units = tensor_units(net, node_tensor_groups(net, t), base.peak_tflops, options.untyped_memory_bytes,
                               options.tensor_efficiency);
  problem.config.tensor_parallel = t;
  problem.config.tensor_latency_s = problem.units.ring_latency_s;
  problem.config.tensor_bandwidth_bytes_per_s = problem.units.ring_bandwidth_bytes_per_s;
  problem.config.device_tflops.clear();  // the unit network's types say
  problem.options.memory.tensor_parallel = t;
  return problem;
}

Layout layout_on_devices(Layout layout, const Network& net, const TensorProblem& problem) {
  const int t = problem.units.tensor_parallel;
  if (t <= 1) return layout;
  layout.plan.tensor_parallel = t;
  layout.plan.tensor_groups = problem.units.groups;
  std::vector<char> used(net.device_count, 0);
  for (const auto& stage : layout.plan.stages) {
    for (int unit : stage) {
      for (int d : problem.units.groups[unit]) used[d] = 1;
    }
  }
  layout.idle_devices.clear();
  for (int d = 0; d < net.device_count; ++d) {
    if (!used[d]) layout.idle_devices.push_back(d);
  }
  layout.units = problem.units;
  return layout;
}

// Each tensor-parallel degree: the search on its unit network; the fastest wins.
Layout search_layout(const Network& net, const SimulationConfig& base, const LayoutOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> wanted = options.tensor_parallel ? std::vector<int>{*options.tensor_parallel}
                                                          : options.tensor_parallel_choices;
  std::vector<int> choices = tensor_parallel_choices(net, base.model, wanted);
  if (choices.empty()) {
    if (options.tensor_parallel && *options.tensor_parallel != 1) {
      throw LayoutError("tensor parallel " + std::to_string(*options.tensor_parallel) +
                        " does not fit: it must divide the model's " + std::to_string(base.model.heads) +
                        " heads and hidden size " + std::to_string(base.model.hidden) +
                        " and a node must hold that many devices (scenario: gpus_per_node or node labels)");
    }
    choices = {1};
  }
  std::optional<Layout> best;
  std::vector<std::pair<int, double>> tried;
  std::string last_error;
  for (int t : choices) {
    const TensorProblem problem = tensor_problem(net, base, options, t);
    try {
      Layout found = layout::search_devices(problem.units.network, problem.config, problem.options);
      tried.emplace_back(t, found.simulation.iteration_s);
      if (!best || found.simulation.iteration_s < best->simulation.iteration_s) {
        best = layout_on_devices(std::move(found), net, problem);
      }
    } catch (const LayoutError& e) {
      tried.emplace_back(t, layout::kInf);
      if (last_error.empty() || t == 1) last_error = e.what();
    }
  }
  if (!best) throw LayoutError(last_error);
  best->tensor_parallel_tried = tried;
  best->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return *best;
}

namespace layout {
namespace {
Layout search_devices(const Network& net, const SimulationConfig& base, const LayoutOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const Context ctx = make_context(net, base, options);
  const std::vector<int> order = fastest_first(ctx);
  const std::vector<Degrees> degrees = candidate_degrees(ctx, order);
  if (degrees.empty()) {
    throw LayoutError("no pp x dp fits: " + std::to_string(net.device_count) + " devices, " +
                      std::to_string(base.model.layers) + " layers, batch " + std::to_string(base.global_batch_sequences) +
                      " (dp must divide the batch, pp <= layers, pp x dp <= devices)");
  }
  // Screening: structured placements, balanced split.
  std::vector<LayoutCandidate> screened;
  for (const Degrees& d : degrees) {
    const std::vector<int> devices(order.begin(), order.begin() + d.pp * d.dp);
    for (const Candidate& c : placements(ctx, devices, d.pp, d.dp, false)) {
      for (int b : micro_batch_choices(ctx, d.dp)) {
        const Split split = best_split(ctx, c.plan, b, false);
        auto same = std::find_if(screened.begin(), screened.end(), [&](const LayoutCandidate& s) {
          return s.pipeline_stages == d.pp && s.data_parallel == d.dp && s.micro_batch_sequences == b;
        });
        if (same == screened.end()) screened.push_back({d.pp, d.dp, b, kInf, false}), same = screened.end() - 1;
        same->iteration_s = std::min(same->iteration_s, split.iteration_s);
      }
    }
  }
  std::stable_sort(screened.begin(), screened.end(),
                   [](const LayoutCandidate& a, const LayoutCandidate& b) { return a.iteration_s < b.iteration_s; });
  // Finalists: the best few distinct (pp, dp), searched in full.
  std::set<Degrees> finalists;
  for (LayoutCandidate& c : screened) {
    if (!std::isfinite(c.iteration_s) || static_cast<int>(finalists.size()) >= options.finalists) continue;
    if (finalists.insert({c.pipeline_stages, c.data_parallel}).second) c.finalist = true;
  }
  if (finalists.empty()) fail_memory(ctx, degrees);
  Placed best;
  std::string source;
  for (const Degrees& d : finalists) {
    const std::vector<int> devices(order.begin(), order.begin() + d.pp * d.dp);
    for (const Candidate& c : placements(ctx, devices, d.pp, d.dp, true)) {
      const Placed placed = best_over_micro_batches(ctx, c.plan, true);
      if (placed.split.iteration_s < best.split.iteration_s) best = placed, source = c.source;
    }
  }
  rescore(ctx, best.plan);
  Layout result = describe(ctx, best.plan, best.split);
  result.placement_source = source;
  result.candidates = screened;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}
}  // namespace
}  // namespace layout

Layout evaluate_layout(const Network& net, const SimulationConfig& config, const Plan& plan,
                       const LayoutOptions& options) {
  using namespace layout;
  const Context ctx = make_context(net, config, options);
  Split split;
  split.fits = true;
  split.micro_batch = config.micro_batch_sequences;
  const int per_replica = config.global_batch_sequences / (plan.data_parallel * std::max(1, split.micro_batch));
  const int flush = config.micro_batches_per_flush;
  split.flush = flush <= 0 || flush > per_replica ? per_replica : flush;
  split.layers = stage_layers(config.model, plan.pipeline_stages, config.layers_per_stage);
  Layout result = describe(ctx, plan, split);
  result.placement_source = "given";
  return result;
}

Layout complete_layout(const Network& net, const SimulationConfig& base, const Plan& plan, const LayoutOptions& options) {
  using namespace layout;
  const auto start = std::chrono::steady_clock::now();
  const Context ctx = make_context(net, base, options);
  Placed best = best_over_micro_batches(ctx, plan, true);
  if (!best.split.fits) {
    throw LayoutError("the placement " + std::to_string(plan.pipeline_stages) + " x " +
                      std::to_string(plan.data_parallel) + " does not fit in device memory with any micro-batch");
  }
  rescore(ctx, best.plan);
  Layout result = describe(ctx, best.plan, best.split);
  result.placement_source = "given";
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace geotrain::plan
