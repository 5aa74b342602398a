// Structured starting points for the search. Real networks are clusters
// (GPUs in a machine, machines in a site) joined by slower links; the good
// plans keep each pipeline segment inside a cluster and spread each
// data-parallel group over clusters (reference §7(a), §7(c)). Random
// permutations almost never land there, so the first population also holds
// the two rank orders and packings of single-linkage clusters.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "geotrain/plan/plan.hpp"
#include "search_internal.hpp"

namespace geotrain::plan {
namespace {

struct UnionFind {
  std::vector<int> parent;
  explicit UnionFind(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) { return parent[x] == x ? x : parent[x] = find(parent[x]); }
  void unite(int a, int b) { parent[find(a)] = find(b); }
};

// Clusters (largest first, members ascending) after joining every pair whose
// link costs at most `threshold`.
std::vector<std::vector<int>> clusters_at(const CostModel& model, double threshold) {
  const int n = model.devices();
  UnionFind sets(n);
  for (int u = 0; u < n; ++u) {
    for (int v = u + 1; v < n; ++v) {
      if (model.pipeline_link(u, v) <= threshold) sets.unite(u, v);
    }
  }
  std::vector<std::vector<int>> by_root(n);
  for (int u = 0; u < n; ++u) by_root[sets.find(u)].push_back(u);
  std::vector<std::vector<int>> clusters;
  for (auto& c : by_root) {
    if (!c.empty()) clusters.push_back(std::move(c));
  }
  std::stable_sort(clusters.begin(), clusters.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return clusters;
}

// Pipeline segments inside clusters: cut each cluster into runs of at most
// D_pp devices and put each run in the replica (row) with the most free
// stages, from its first free stage. Group s = the devices at stage s.
Assignment pack_rows(const std::vector<std::vector<int>>& clusters, int k, int d) {
  std::vector<std::vector<int>> rows(d);
  for (const auto& cluster : clusters) {
    for (size_t start = 0; start < cluster.size();) {
      int row = 0;
      for (int r = 1; r < d; ++r) {
        if (rows[r].size() < rows[row].size()) row = r;
      }
      const size_t room = k - rows[row].size();
      const size_t take = std::min(room, cluster.size() - start);
      rows[row].insert(rows[row].end(), cluster.begin() + start, cluster.begin() + start + take);
      start += take;
    }
  }
  Assignment a;
  for (int s = 0; s < k; ++s) {
    for (int r = 0; r < d; ++r) a.push_back(rows[r][s]);
  }
  return a;
}

// Stages inside clusters: devices in cluster order fill group after group.
Assignment pack_groups(const std::vector<std::vector<int>>& clusters) {
  Assignment a;
  for (const auto& c : clusters) a.insert(a.end(), c.begin(), c.end());
  return a;
}

}  // namespace

std::vector<Assignment> structured_seeds(const CostModel& model, int limit) {
  const int n = model.devices(), k = model.groups(), d = model.group_size();
  std::vector<Assignment> seeds{dtfm_rank_order(k, d), megatron_rank_order(k, d)};

  // Distinct link costs (up to a relative 1e-9) are the merge levels.
  std::vector<double> levels;
  for (int u = 0; u < n; ++u) {
    for (int v = u + 1; v < n; ++v) levels.push_back(model.pipeline_link(u, v));
  }
  std::sort(levels.begin(), levels.end());
  std::vector<double> distinct;
  for (double x : levels) {
    if (distinct.empty() || x > distinct.back() * (1 + 1e-9)) distinct.push_back(x);
  }
  const size_t wanted = 12;
  std::vector<double> thresholds;
  if (distinct.size() <= wanted) {
    thresholds = distinct;
  } else {
    for (size_t i = 0; i < wanted; ++i) thresholds.push_back(distinct[i * (distinct.size() - 1) / (wanted - 1)]);
  }
  size_t previous_count = 0;
  for (double t : thresholds) {
    const auto clusters = clusters_at(model, t);
    if (clusters.size() == previous_count || clusters.size() == 1) continue;
    previous_count = clusters.size();
    seeds.push_back(pack_rows(clusters, k, d));
    seeds.push_back(pack_groups(clusters));
  }
  if (static_cast<int>(seeds.size()) > limit) seeds.resize(std::max(limit, 0));
  return seeds;
}

}  // namespace geotrain::plan
