// One placement: which micro-batch flush and which layer split. The split
// starts balanced (each stage's layers in proportion to its slowest
// device's speed, within its memory) and is then refined by simulation,
// because communication (a stage's DP exchange, its links) and the
// pipeline's fill and drain also depend on it.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "geotrain/plan/exchange_cost.hpp"
#include "layout_internal.hpp"

namespace geotrain::plan::layout {
namespace {

int stages_of(const Plan& plan) { return plan.pipeline_stages; }

// A stage runs at the pace of its slowest device (the replicas of a stage
// meet at the DP exchange), within the memory of its smallest one.
double group_min(const std::vector<double>& per_device, const std::vector<int>& group) {
  double least = kInf;
  for (int d : group) least = std::min(least, per_device[d]);
  return least;
}

std::vector<int> max_layers(const Context& ctx, const Plan& plan, int b, int slots) {
  const int p = stages_of(plan);
  std::vector<int> limit(p);
  for (int s = 0; s < p; ++s) {
    const double capacity = group_min(ctx.memory, plan.stages[s]);
    limit[s] = std::isfinite(capacity)
                   ? max_layers_within(ctx.base.model, s == 0, s == p - 1, b, slots, ctx.options.memory, capacity)
                   : ctx.base.model.layers;
  }
  return limit;
}

// Min-max balance: give each stage one layer, then each next layer to the
// stage that would finish it soonest ((layers + head) / speed), within its
// limit. Greedy is optimal for the bottleneck of identical units. The LM
// head's compute counts on the last stage, in layer units.
std::vector<int> balanced_split(const Context& ctx, const Plan& plan, int b, const std::vector<int>& limit) {
  const int p = stages_of(plan), L = ctx.base.model.layers;
  std::vector<double> speed(p);
  for (int s = 0; s < p; ++s) speed[s] = group_min(ctx.base.device_tflops, plan.stages[s]);
  const ModelShape& m = ctx.base.model;
  const double head = ctx.base.lm_head ? 2.0 * b * m.sequence_length * m.hidden * static_cast<double>(m.vocabulary) /
                                             layer_forward_flops(m, b)
                                       : 0.0;
  std::vector<int> layers(p, 1);
  for (int s = 0; s < p; ++s) {
    if (limit[s] < 1) return {};
  }
  for (int placed = p; placed < L; ++placed) {
    int pick = -1;
    double best = kInf;
    for (int s = 0; s < p; ++s) {
      const double finish = (layers[s] + 1 + (s == p - 1 ? head : 0.0)) / speed[s];
      if (layers[s] < limit[s] && finish < best) best = finish, pick = s;
    }
    if (pick < 0) return {};
    ++layers[pick];
  }
  return layers;
}

std::vector<int> even_split(const Context& ctx, int p, const std::vector<int>& limit) {
  std::vector<int> layers = stage_layers(ctx.base.model, p, {});
  for (int s = 0; s < p; ++s) {
    if (layers[s] > limit[s]) return {};
  }
  return layers;
}

double simulate_split(const Context& ctx, const Plan& plan, int b, int flush, const std::vector<int>& layers) {
  SimulationConfig c = ctx.base;
  c.micro_batch_sequences = b;
  c.micro_batches_per_flush = flush;
  c.layers_per_stage = layers;
  return simulate(ctx.net, plan, c).iteration_s;
}

// Stages a layer may leave: every stage in short pipelines; in long ones
// the three with the most compute per speed and the one with the slowest
// DP exchange (the two ways a stage holds the iteration back).
std::vector<int> donors(const Context& ctx, const Plan& plan, const std::vector<int>& layers) {
  const int p = stages_of(plan);
  std::vector<int> all(p);
  std::iota(all.begin(), all.end(), 0);
  if (p <= 8) return all;
  std::vector<double> load(p);
  for (int s = 0; s < p; ++s) load[s] = layers[s] / group_min(ctx.base.device_tflops, plan.stages[s]);
  std::sort(all.begin(), all.end(), [&](int a, int b) { return load[a] > load[b]; });
  std::vector<int> chosen(all.begin(), all.begin() + 3);
  double slowest = -1;
  int exchange = 0;
  for (int s = 0; s < p; ++s) {
    const double bytes = stage_parameters(ctx.base.model, layers[s], s == 0, s == p - 1) * ctx.base.model.gradient_bytes;
    const double t = datap_exchange_s(ctx.net, plan.stages[s], bytes, ctx.base.dp_scheme);
    if (t > slowest) slowest = t, exchange = s;
  }
  if (std::find(chosen.begin(), chosen.end(), exchange) == chosen.end()) chosen.push_back(exchange);
  return chosen;
}

// Moves one layer at a time, the move that shortens the simulated
// iteration most, until none does.
void hill_climb(const Context& ctx, const Plan& plan, const std::vector<int>& limit, Split& split) {
  const int p = stages_of(plan);
  for (int round = 0; round < 4 * ctx.base.model.layers; ++round) {
    std::vector<int> best_layers;
    double best = split.iteration_s * (1.0 - 1e-12);
    for (int from : donors(ctx, plan, split.layers)) {
      for (int to = 0; to < p; ++to) {
        if (to == from || split.layers[from] <= 1 || split.layers[to] >= limit[to]) continue;
        std::vector<int> trial = split.layers;
        --trial[from], ++trial[to];
        const double t = simulate_split(ctx, plan, split.micro_batch, split.flush, trial);
        if (t < best) best = t, best_layers = trial;
      }
    }
    if (best_layers.empty()) return;
    split.layers = best_layers;
    split.iteration_s = best;
  }
}

// Flush sizes to try: GPipe every divisor of M (more micro-batches per
// flush: a smaller bubble but more activations alive), 1F1B one flush.
std::vector<int> flush_choices(const Context& ctx, int micro_batches) {
  if (ctx.options.micro_batches_per_flush) {
    const int m = *ctx.options.micro_batches_per_flush;
    return micro_batches % m == 0 ? std::vector<int>{m} : std::vector<int>{};
  }
  if (ctx.base.schedule != Schedule::gpipe) return {micro_batches};
  std::vector<int> choices;
  for (int m = micro_batches; m >= 1; --m) {
    if (micro_batches % m == 0) choices.push_back(m);
  }
  return choices;
}

}  // namespace

Context make_context(const Network& net, const SimulationConfig& base, const LayoutOptions& options) {
  Context ctx{net, base, options, net.device_memory_bytes(options.untyped_memory_bytes)};
  ctx.base.device_tflops = net.device_tflops(base.peak_tflops);
  ctx.base.exchange_costs = std::make_shared<ExchangeCostCache>();
  for (double& bytes : ctx.memory) {
    if (!(bytes > 0)) bytes = kInf;
  }
  return ctx;
}

std::vector<int> micro_batch_choices(const Context& ctx, int dp) {
  const int per_replica = ctx.base.global_batch_sequences % dp == 0 ? ctx.base.global_batch_sequences / dp : 0;
  std::vector<int> choices;
  if (ctx.options.micro_batch_sequences) {
    choices.push_back(*ctx.options.micro_batch_sequences);
  } else {
    choices = ctx.options.micro_batch_choices;
  }
  std::vector<int> usable;
  for (int b : choices) {
    if (b >= 1 && per_replica > 0 && per_replica % b == 0) usable.push_back(b);
  }
  return usable;
}

Split best_split(const Context& ctx, const Plan& plan, int b, bool refine, int only_flush) {
  const int p = stages_of(plan), dp = plan.data_parallel;
  Split best;
  if (ctx.base.global_batch_sequences % (dp * b) != 0 || p > ctx.base.model.layers) return best;
  const int micro_batches = ctx.base.global_batch_sequences / (dp * b);
  std::vector<int> best_limit;
  for (int flush : only_flush > 0 ? std::vector<int>{only_flush} : flush_choices(ctx, micro_batches)) {
    const std::vector<int> limit = max_layers(ctx, plan, b, activation_slots(ctx.base.schedule, flush, p));
    const std::vector<int> layers = ctx.options.even_split ? even_split(ctx, p, limit) : balanced_split(ctx, plan, b, limit);
    if (layers.empty()) continue;
    const double t = simulate_split(ctx, plan, b, flush, layers);
    if (t < best.iteration_s) best = {true, b, flush, layers, t}, best_limit = limit;
  }
  if (best.fits && refine && !ctx.options.even_split) hill_climb(ctx, plan, best_limit, best);
  return best;
}

std::vector<double> stage_memory_bytes(const Context& ctx, const Plan& plan, const Split& split) {
  const int p = stages_of(plan);
  const int slots = activation_slots(ctx.base.schedule, split.flush, p);
  std::vector<double> bytes;
  for (int s = 0; s < p; ++s) {
    const StagePart part{split.layers[s], s == 0, s == p - 1};
    bytes.push_back(stage_memory(ctx.base.model, part, split.micro_batch, slots, ctx.options.memory).total_bytes());
  }
  return bytes;
}

Layout describe(const Context& ctx, const Plan& plan, const Split& split) {
  Layout layout;
  layout.plan = plan;
  layout.layers_per_stage = split.layers;
  layout.micro_batch_sequences = split.micro_batch;
  layout.micro_batches = ctx.base.global_batch_sequences / (plan.data_parallel * split.micro_batch);
  layout.micro_batches_per_flush = split.flush;
  std::vector<char> used(ctx.net.device_count, 0);
  for (const auto& group : plan.stages) {
    for (int d : group) used[d] = 1;
    layout.capacity_bytes_per_stage.push_back(group_min(ctx.memory, group));
  }
  for (int d = 0; d < ctx.net.device_count; ++d) {
    if (!used[d]) layout.idle_devices.push_back(d);
  }
  layout.memory_bytes_per_stage = stage_memory_bytes(ctx, plan, split);
  layout.config = ctx.base;
  layout.config.micro_batch_sequences = split.micro_batch;
  layout.config.micro_batches_per_flush = split.flush;
  layout.config.layers_per_stage = split.layers;
  layout.simulation = simulate(ctx.net, plan, layout.config);
  // The cache holds this search's network's costs by member ids: a layout
  // mapped onto devices (tensor parallelism) means other devices by them.
  layout.config.exchange_costs = nullptr;
  return layout;
}

}  // namespace geotrain::plan::layout
