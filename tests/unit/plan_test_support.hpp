// Small networks and brute-force references for the planner tests.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "geotrain/plan/cost_model.hpp"
#include "geotrain/plan/plan.hpp"
#include "geotrain/plan/simulator.hpp"

namespace geotrain::plan::testing {

// Two-site network of reference §8.3 (example A) with its c_DP and c_PP.
inline Network example_a_network() {
  Network net;
  net.device_count = 4;
  for (int u = 0; u < 4; ++u) {
    for (int v = 0; v < 4; ++v) {
      const bool same_site = (u < 2) == (v < 2);
      net.latency_s.push_back(same_site ? 0.001 : 0.050);
      net.bandwidth_bytes_per_s.push_back((same_site ? 10.0 : 1.0) * kBytesPerGbit);
    }
  }
  return net;
}

// Every link the same: latency 0 and the given bandwidth.
inline Network uniform_network(int n, double bandwidth_bytes_per_s) {
  Network net;
  net.device_count = n;
  net.latency_s.assign(static_cast<size_t>(n) * n, 0.0);
  net.bandwidth_bytes_per_s.assign(static_cast<size_t>(n) * n, bandwidth_bytes_per_s);
  return net;
}

// Two devices, `latency_s` one way each, 0 -> 1 at `forward` and 1 -> 0 at
// `back` bytes/s: the toy network of the simulator tests.
inline Network two_device_network(double latency_s, double forward, double back) {
  Network net = uniform_network(2, forward);
  net.latency_s = {0.0, latency_s, latency_s, 0.0};
  net.bandwidth_bytes_per_s[2] = back;
  return net;
}

// Replica r at stage s runs on device s * dp + r (any bijection would do).
// pp stages of tf forward / tb backward per micro-batch, m micro-batches per
// flush, 8 MB activations, no data-parallel gradient.
inline PipelineWork equal_stages(int pp, int m, int flushes, double tf, double tb, Schedule schedule) {
  PipelineWork w;
  w.micro_batches_per_flush = m;
  w.flushes = flushes;
  w.forward_s.assign(pp, tf);
  w.backward_s.assign(pp, tb);
  w.activation_bytes = 8e6;
  w.gradient_bytes.assign(pp, 0.0);
  w.schedule = schedule;
  return w;
}

inline Plan grid_plan(int pp, int dp) {
  Plan plan;
  plan.pipeline_stages = pp;
  plan.data_parallel = dp;
  for (int s = 0; s < pp; ++s) {
    plan.stages.emplace_back();
    for (int r = 0; r < dp; ++r) plan.stages.back().push_back(s * dp + r);
  }
  return plan;
}

// `batch` sequences of `shape` per iteration (fp16 activations, fp32
// gradients), in micro-batches of one sequence, on devices of `peak_tflops`
// at `efficiency`.
inline SimulationConfig simulation_config(const ModelShape& shape, int batch, double peak_tflops, double efficiency) {
  SimulationConfig c;
  c.model = TrainingShape(shape, static_cast<double>(batch) * shape.sequence_length, 2, 4);
  c.global_batch_sequences = batch;
  c.micro_batch_sequences = 1;
  c.peak_tflops = peak_tflops;
  c.efficiency = efficiency;
  return c;
}

// simulation_config at 1e18 FLOP/s (compute negligible) in one flush: the
// communication decides the step.
inline SimulationConfig communication_bound(const ModelShape& shape, int batch) {
  SimulationConfig c = simulation_config(shape, batch, 1e6, 1.0);
  c.micro_batches_per_flush = 0;
  return c;
}

// f(parts) for every composition of `total` into `parts` positive counts, in
// lexicographic order; `prefix` (empty at the start) holds the counts chosen.
inline void compositions(int total, int parts, std::vector<int>& prefix,
                         const std::function<void(const std::vector<int>&)>& f) {
  if (parts == 1) {
    prefix.push_back(total);
    f(prefix);
    prefix.pop_back();
    return;
  }
  for (int first = 1; first <= total - (parts - 1); ++first) {
    prefix.push_back(first);
    compositions(total - first, parts - 1, prefix, f);
    prefix.pop_back();
  }
}

inline Workload example_a_workload() {
  Workload w;
  w.pipeline_stages = 2;
  w.data_parallel = 2;
  w.c_dp_bytes = 1.25e9;  // 10 Gbit
  w.c_pp_bytes = 1.25e8;  // 1 Gbit
  return w;
}

// Random network, possibly asymmetric, with a few clusters so that ties and
// structure both occur. Integer-ish values create ties deliberately.
inline Network random_network(int n, std::mt19937_64& rng, bool symmetric) {
  std::uniform_int_distribution<int> site(0, 2), lat(0, 40), bw(1, 20);
  std::vector<int> site_of(n);
  for (auto& s : site_of) s = site(rng);
  Network net;
  net.device_count = n;
  net.latency_s.assign(n * n, 0.0);
  net.bandwidth_bytes_per_s.assign(n * n, 1.0);
  for (int u = 0; u < n; ++u) {
    for (int v = 0; v < n; ++v) {
      if (u == v || (symmetric && v < u)) continue;
      const bool same = site_of[u] == site_of[v];
      const double latency = (same ? 1 : 10 + lat(rng)) * 1e-3;
      const double bandwidth = (same ? 10 + bw(rng) : bw(rng) / 4.0) * kBytesPerGbit;
      net.latency_s[u * n + v] = latency;
      net.bandwidth_bytes_per_s[u * n + v] = bandwidth;
      if (symmetric) {
        net.latency_s[v * n + u] = latency;
        net.bandwidth_bytes_per_s[v * n + u] = bandwidth;
      }
    }
  }
  return net;
}

inline Workload small_workload(int pp, int dp) {
  Workload w;
  w.pipeline_stages = pp;
  w.data_parallel = dp;
  w.c_pp_bytes = 2e8;
  w.c_dp_bytes = 6e8;
  return w;
}

// Calls `visit` with every partition of 0..n-1 into groups of `size`
// (unlabelled: each partition exactly once), as an Assignment.
inline void for_each_partition(int n, int size, const std::function<void(const Assignment&)>& visit) {
  Assignment current;
  std::vector<char> used(n, 0);
  std::function<void(int)> place = [&](int last) {
    if (static_cast<int>(current.size()) == n) {
      visit(current);
      return;
    }
    auto take = [&](int v) {
      used[v] = 1;
      current.push_back(v);
      place(v);
      current.pop_back();
      used[v] = 0;
    };
    if (current.size() % size == 0) {  // a new group opens with the lowest unused device
      int first = 0;
      while (used[first]) ++first;
      take(first);
      return;
    }
    for (int v = last + 1; v < n; ++v) {
      if (!used[v]) take(v);
    }
  };
  place(-1);
}

// The true optimum by brute force over partitions, stage orders and all
// matchings (every permutation), straight from the definitions in §2.
inline double brute_force_total(const CostModel& model, const Assignment& a) {
  const int k = model.groups(), d = model.group_size();
  auto group_cost = [&](int g, int h) {
    std::vector<int> perm(d);
    std::iota(perm.begin(), perm.end(), 0);
    double best = std::numeric_limits<double>::infinity();
    do {
      double worst = 0;
      for (int i = 0; i < d; ++i) worst = std::max(worst, model.pipeline_link(a[g * d + i], a[h * d + perm[i]]));
      best = std::min(best, worst);
    } while (std::next_permutation(perm.begin(), perm.end()));
    return best;
  };
  std::vector<int> order(k);
  std::iota(order.begin(), order.end(), 0);
  double best_path = std::numeric_limits<double>::infinity();
  do {
    double length = 0;
    for (int s = 1; s < k; ++s) length += group_cost(order[s - 1], order[s]);
    best_path = std::min(best_path, length);
  } while (std::next_permutation(order.begin(), order.end()));
  double datap = 0;
  for (int g = 0; g < k; ++g) {
    for (int i = 0; i < d; ++i) {
      double sum = 0;
      for (int j = 0; j < d; ++j) sum += model.datap_pair(a[g * d + i], a[g * d + j]);
      datap = std::max(datap, sum);
    }
  }
  return datap + best_path;
}

}  // namespace geotrain::plan::testing
