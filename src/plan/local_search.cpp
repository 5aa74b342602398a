// Two local searches over partitions:
//  * paper_local_search: the original's cyclic multi-way moves steered by its
//    "default" gain heuristic (reference §3.2), reproduced for comparison;
//  * swap_local_search: geotrain's own, exchanging two devices between groups
//    when the true cost (DATAP + pipeline with the current stage order) drops,
//    evaluated incrementally.
#include <algorithm>
#include <limits>
#include <numeric>

#include "geotrain/plan/bottleneck_matching.hpp"
#include "geotrain/plan/open_path.hpp"
#include "search_internal.hpp"

namespace geotrain::plan {

// ====================================================================== paper
namespace {

struct PaperMove {
  int vertex, from, to;
  double gain, close_gain;  // epsilon_k and tau_k of §3.2
};

// Candidate of group `group` (unlocked member with the cheapest link to its
// own group) and its gain toward every other group: mean link to the target
// group minus that cheapest own link. Returns -1 if the group has none.
int paper_candidate(const CostModel& model, const std::vector<int>& labels,
                    const std::vector<char>& locked, int group, std::vector<double>& gain) {
  const int n = model.devices(), k = model.groups();
  int best = -1;
  double best_own = std::numeric_limits<double>::infinity();
  for (int v = 0; v < n; ++v) {
    if (labels[v] != group || locked[v]) continue;
    double own = std::numeric_limits<double>::infinity();
    for (int u = 0; u < n; ++u) {
      if (u != v && labels[u] == group) own = std::min(own, model.pipeline_link(v, u));
    }
    if (own < best_own) best_own = own, best = v;
  }
  if (best < 0) return -1;
  std::vector<double> sum(k, 0.0);
  std::vector<int> count(k, 0);
  for (int u = 0; u < n; ++u) {
    if (u == best) continue;
    sum[labels[u]] += model.pipeline_link(best, u);
    ++count[labels[u]];
  }
  gain.assign(k, -std::numeric_limits<double>::infinity());
  for (int t = 0; t < k; ++t) {
    if (t != group && count[t] > 0) gain[t] = sum[t] / count[t] - best_own;
  }
  return best;
}

int argmax(const std::vector<double>& values) {
  return static_cast<int>(std::max_element(values.begin(), values.end()) - values.begin());
}

// One cycle: a chain of moves from the group with the largest gain, cut at
// the prefix whose gains (closing the cycle back to its start) sum highest.
double paper_cycle(const CostModel& model, std::vector<int>& labels, std::vector<char>& locked,
                   std::vector<char>& targeted) {
  const int n = model.devices(), k = model.groups();
  std::vector<double> gain;
  int start = -1;
  double start_gain = -std::numeric_limits<double>::infinity();
  for (int g = 0; g < k; ++g) {
    if (paper_candidate(model, labels, locked, g, gain) < 0) continue;
    const double best = gain[argmax(gain)];
    if (best > start_gain) start_gain = best, start = g;
  }
  if (start < 0) return 0;

  std::vector<PaperMove> chain;
  int current = start;
  for (int step = 0; step < n; ++step) {
    const int v = paper_candidate(model, labels, locked, current, gain);
    if (v < 0) break;
    const int target = argmax(gain);
    const double close = current == start ? 0.0 : gain[start];
    chain.push_back({v, current, target, gain[target], target == start ? gain[target] : close});
    labels[v] = target;
    locked[v] = 1;
    if (target == start) break;
    current = target;
  }

  // Best prefix length l: moves 1..l-1 kept, move l redirected to the start.
  double best_value = 0, running = 0;
  size_t keep = 0;
  for (size_t m = 0; m < chain.size(); ++m) {
    const double value = running + chain[m].close_gain;
    if (value > best_value) best_value = value, keep = m + 1;
    running += chain[m].gain;
  }
  for (size_t m = chain.size(); m-- > 0;) {
    if (m + 1 > keep) labels[chain[m].vertex] = chain[m].from;
  }
  if (keep > 0) {
    labels[chain[keep - 1].vertex] = start;
    for (size_t m = 0; m + 1 < keep; ++m) targeted[chain[m].to] = 1;
    targeted[start] = 1;
  }
  return best_value;
}

}  // namespace

void paper_local_search(const CostModel& model, Assignment& assignment, bool off_by_one) {
  const int n = model.devices(), k = model.groups(), d = model.group_size();
  if (d < 2 || k < 2) return;
  std::vector<int> labels = labels_of(assignment, d);
  std::vector<char> locked(n, 0), targeted(k, 0);
  std::vector<std::vector<int>> states{labels};
  std::vector<double> cumulative{0.0};
  for (int cycle = 0; cycle < k; ++cycle) {
    const double g = paper_cycle(model, labels, locked, targeted);
    states.push_back(labels);
    cumulative.push_back(cumulative.back() + g);
    if (std::all_of(targeted.begin(), targeted.end(), [](char t) { return t != 0; })) break;
  }
  // The original's loop bound never considers the state after the last cycle.
  const size_t considered = off_by_one ? cumulative.size() - 1 : cumulative.size();
  size_t best = 0;
  for (size_t c = 1; c < considered; ++c) {
    if (cumulative[c] > cumulative[best]) best = c;
  }
  assignment = assignment_of(states[best], k, d);
}

// ======================================================================= swap
namespace {

class SwapState {
 public:
  SwapState(const CostModel& model, const Assignment& assignment, int exact_path_limit, GroupPairCache& cache)
      : m_(model), cache_(cache), n_(model.devices()), k_(model.groups()), d_(model.group_size()),
        exact_limit_(exact_path_limit), a_(assignment), group_of_(n_), slot_of_(n_), row_sum_(n_),
        group_max_(k_), group_key_(k_), pair_cost_(static_cast<size_t>(k_) * k_, 0.0) {
    for (int i = 0; i < n_; ++i) group_of_[a_[i]] = i / d_, slot_of_[a_[i]] = i % d_;
    for (int g = 0; g < k_; ++g) refresh_group(g), group_key_[g] = cache_.group_key(&a_[g * d_], d_);
    for (int g = 0; g < k_; ++g) {
      for (int h = g + 1; h < k_; ++h) set_pair(g, h, boundary(g, h, -1, -1));
    }
    reorder();
  }

  double total() const { return total_; }
  const Assignment& assignment() const { return a_; }
  int group_of(int device) const { return group_of_[device]; }
  int worst_datap_group() const { return argmax_group(-1, -1); }
  // Group at either end of the most expensive boundary.
  std::pair<int, int> worst_boundary() const {
    std::pair<int, int> worst{order_[0], order_[0]};
    double value = -1;
    for (int p = 1; p < k_; ++p) {
      const double c = pair_cost_[order_[p - 1] * k_ + order_[p]];
      if (c > value) value = c, worst = {order_[p - 1], order_[p]};
    }
    return worst;
  }

  // Total after exchanging x and y (different groups), stage order kept;
  // +inf as soon as it provably cannot beat `bar`.
  double swapped_total(int x, int y, double bar) {
    const int ga = group_of_[x], gb = group_of_[y];
    double datap = 0;
    for (int g = 0; g < k_; ++g) {
      if (g != ga && g != gb) datap = std::max(datap, group_max_[g]);
    }
    datap = std::max({datap, swapped_group_max(ga, x, y), swapped_group_max(gb, y, x)});
    double pipeline = path_length_;
    touched_.clear();
    for (int p = 1; p < k_; ++p) {
      const int g = order_[p - 1], h = order_[p];
      if (g == ga || g == gb || h == ga || h == gb) {
        pipeline -= pair_cost_[g * k_ + h];
        touched_.push_back(p);
      }
    }
    // Cheap bounds first. Upper: the boundary's current optimal matching
    // with the exchanged devices re-paired in place. Lower: the newcomer
    // must be matched to someone. Only undecided moves pay for exact
    // bottleneck matchings.
    double upper = datap + pipeline, lower = datap + pipeline;
    for (int p : touched_) {
      const auto [lo, hi] = boundary_bounds(p, x, y);
      lower += lo;
      upper += hi;
    }
    if (upper < bar) return upper;
    if (lower >= bar) return std::numeric_limits<double>::infinity();
    double total = datap + pipeline;
    for (int p : touched_) {
      if (total >= bar) return std::numeric_limits<double>::infinity();
      total += boundary(order_[p - 1], order_[p], x, y);
    }
    return total;
  }

  void apply_swap(int x, int y) {
    const int ga = group_of_[x], gb = group_of_[y];
    std::swap(a_[ga * d_ + slot_of_[x]], a_[gb * d_ + slot_of_[y]]);
    std::swap(group_of_[x], group_of_[y]);
    std::swap(slot_of_[x], slot_of_[y]);
    const std::uint64_t exchanged = cache_.device_key(x) ^ cache_.device_key(y);
    group_key_[ga] ^= exchanged;
    group_key_[gb] ^= exchanged;
    refresh_group(ga);
    refresh_group(gb);
    for (int g = 0; g < k_; ++g) {
      if (g != ga) set_pair(ga, g, boundary(ga, g, -1, -1));
      if (g != gb && g != ga) set_pair(gb, g, boundary(gb, g, -1, -1));
    }
    reorder();
  }

 private:
  // Member `slot` of group g, with devices x and y exchanged if x >= 0.
  int member(int g, int slot, int x, int y) const {
    const int v = a_[g * d_ + slot];
    if (x < 0) return v;
    return v == x ? y : (v == y ? x : v);
  }

  // Key of group g with x and y exchanged (if x >= 0).
  std::uint64_t key(int g, int x, int y) const {
    if (x < 0 || (group_of_[x] != g && group_of_[y] != g)) return group_key_[g];
    return group_key_[g] ^ cache_.device_key(x) ^ cache_.device_key(y);
  }

  double boundary(int g, int h, int x, int y) {
    return cache_.bottleneck(key(g, x, y), [&](int i) { return member(g, i, x, y); },
                             key(h, x, y), [&](int j) { return member(h, j, x, y); });
  }

  // Largest DATAP row sum of group g after `out` leaves and `in` arrives.
  double swapped_group_max(int g, int out, int in) const {
    double worst = 0, incoming = 0;
    for (int i = 0; i < d_; ++i) {
      const int u = a_[g * d_ + i];
      if (u == out) continue;
      worst = std::max(worst, row_sum_[u] - m_.datap_pair(u, out) + m_.datap_pair(u, in));
      incoming += m_.datap_pair(in, u);
    }
    return std::max(worst, incoming);
  }

  void refresh_group(int g) {
    group_max_[g] = 0;
    for (int i = 0; i < d_; ++i) {
      const int u = a_[g * d_ + i];
      row_sum_[u] = m_.datap_of_device(u, &a_[g * d_], d_);
      group_max_[g] = std::max(group_max_[g], row_sum_[u]);
    }
  }

  int argmax_group(int skip1, int skip2) const {
    int best = 0;
    double value = -1;
    for (int g = 0; g < k_; ++g) {
      if (g != skip1 && g != skip2 && group_max_[g] > value) value = group_max_[g], best = g;
    }
    return best;
  }

  void set_pair(int g, int h, double value) { pair_cost_[g * k_ + h] = pair_cost_[h * k_ + g] = value; }

  void reorder() {
    const Path path = open_path(pair_cost_, k_, exact_limit_);
    order_ = path.order;
    path_length_ = path.length;
    total_ = *std::max_element(group_max_.begin(), group_max_.end()) + path_length_;
    // Optimal matchings of the boundaries on the path, for the move bounds.
    links_.resize(k_);
    for (int p = 1; p < k_; ++p) {
      const int g = order_[p - 1], h = order_[p];
      std::vector<double> block(static_cast<size_t>(d_) * d_);
      for (int i = 0; i < d_; ++i) {
        for (int j = 0; j < d_; ++j) block[i * d_ + j] = m_.pipeline_link(a_[g * d_ + i], a_[h * d_ + j]);
      }
      PathLink& link = links_[p];
      link.partner = bottleneck_matching(block.data(), d_).partner;
      link.inverse.assign(d_, 0);
      link.edge.assign(d_, 0.0);
      for (int i = 0; i < d_; ++i) {
        link.inverse[link.partner[i]] = i;
        link.edge[i] = block[i * d_ + link.partner[i]];
      }
      std::vector<int> rows(d_);
      std::iota(rows.begin(), rows.end(), 0);
      const int top = std::min(d_, 3);
      std::partial_sort(rows.begin(), rows.begin() + top, rows.end(),
                        [&](int a, int b) { return link.edge[a] > link.edge[b]; });
      link.top.assign(rows.begin(), rows.begin() + top);
    }
  }

  // Lower and upper bound on boundary p (groups order_[p-1], order_[p])
  // after exchanging x and y.
  std::pair<double, double> boundary_bounds(int p, int x, int y) const {
    const int g = order_[p - 1], h = order_[p];
    const PathLink& link = links_[p];
    // Rows are slots of g, columns slots of h. Re-pair in place: whoever
    // leaves hands its partner to whoever arrives in its slot.
    int skip1 = -1, skip2 = -1;
    double repaired = 0, newcomer_best = std::numeric_limits<double>::infinity();
    auto device_at = [&](int group, int slot) { return member(group, slot, x, y); };
    if (group_of_[x] == g || group_of_[y] == g) {
      const int slot = group_of_[x] == g ? slot_of_[x] : slot_of_[y];
      skip1 = slot;
      const int arrived = device_at(g, slot);
      repaired = std::max(repaired, m_.pipeline_link(arrived, device_at(h, link.partner[slot])));
      for (int j = 0; j < d_; ++j) newcomer_best = std::min(newcomer_best, m_.pipeline_link(arrived, device_at(h, j)));
    }
    if (group_of_[x] == h || group_of_[y] == h) {
      const int slot = group_of_[x] == h ? slot_of_[x] : slot_of_[y];
      const int row = link.inverse[slot];
      skip2 = row;
      const int arrived = device_at(h, slot);
      repaired = std::max(repaired, m_.pipeline_link(device_at(g, row), arrived));
      double best = std::numeric_limits<double>::infinity();
      for (int i = 0; i < d_; ++i) best = std::min(best, m_.pipeline_link(device_at(g, i), arrived));
      newcomer_best = skip1 >= 0 ? std::max(newcomer_best, best) : best;
    }
    for (int row : link.top) {
      if (row != skip1 && row != skip2) {
        repaired = std::max(repaired, link.edge[row]);
        break;
      }
    }
    return {newcomer_best, repaired};
  }

  const CostModel& m_;
  GroupPairCache& cache_;
  int n_, k_, d_, exact_limit_;
  Assignment a_;
  std::vector<int> group_of_, slot_of_;
  std::vector<double> row_sum_, group_max_;
  std::vector<std::uint64_t> group_key_;
  std::vector<double> pair_cost_;
  std::vector<int> order_;
  double path_length_ = 0, total_ = 0;
  struct PathLink {
    std::vector<int> partner, inverse, top;  // top: rows of the 3 dearest edges
    std::vector<double> edge;                // edge[row] = link cost of row's pair
  };
  std::vector<PathLink> links_;  // indexed by path position 1..k-1
  std::vector<int> touched_;
};

}  // namespace

void swap_local_search(const CostModel& model, Assignment& assignment, Rng& rng, int exact_path_limit,
                       int move_budget, GroupPairCache& cache) {
  const int n = model.devices(), k = model.groups();
  if (k < 2 || model.group_size() < 1) return;
  SwapState state(model, assignment, exact_path_limit, cache);
  std::vector<int> partners(n);
  std::iota(partners.begin(), partners.end(), 0);
  int evaluations = 0;
  bool improved = true;
  while (improved && evaluations < move_budget) {
    improved = false;
    // Try devices of the groups that set the cost first: the worst DATAP
    // group and the two ends of the most expensive boundary.
    const auto [left, right] = state.worst_boundary();
    std::vector<int> movers;
    for (int g : {state.worst_datap_group(), left, right}) {
      for (int v = 0; v < n; ++v) {
        if (state.group_of(v) == g && std::find(movers.begin(), movers.end(), v) == movers.end()) {
          movers.push_back(v);
        }
      }
    }
    rng.shuffle(movers);
    rng.shuffle(partners);
    for (int x : movers) {
      for (int y : partners) {
        if (state.group_of(x) == state.group_of(y)) continue;
        if (++evaluations > move_budget) break;
        const double bar = state.total() * (1 - 1e-12);
        if (state.swapped_total(x, y, bar) < bar) {
          state.apply_swap(x, y);
          improved = true;
          break;
        }
      }
      if (improved || evaluations > move_budget) break;
    }
  }
  assignment = state.assignment();
}

}  // namespace geotrain::plan
