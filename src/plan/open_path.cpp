#include "geotrain/plan/open_path.hpp"

#include <algorithm>
#include <bit>
#include <limits>

#include "geotrain/common/errors.hpp"

namespace geotrain::plan {

double path_length(const std::vector<double>& dist, int k, const std::vector<int>& order) {
  double length = 0;
  for (size_t i = 1; i < order.size(); ++i) length += dist[order[i - 1] * k + order[i]];
  return length;
}

Path open_path_exact(const std::vector<double>& dist, int k) {
  if (k > 20) throw InputError("open_path_exact: more than 20 groups");
  Path path;
  if (k <= 1) {
    path.order.assign(k, 0);
    return path;
  }
  const double inf = std::numeric_limits<double>::infinity();
  const size_t subsets = size_t{1} << k;
  // best[mask*k + j]: shortest path through exactly `mask`, ending at j.
  thread_local std::vector<double> best;  // reused: called once per candidate
  thread_local std::vector<signed char> previous;
  best.assign(subsets * k, inf);
  previous.assign(subsets * k, -1);
  for (int j = 0; j < k; ++j) best[(size_t{1} << j) * k + j] = 0;
  // Set bits walked lowest first, the same order as testing every j and
  // next: the same ties broken the same way, without a branch per bit.
  const size_t everyone = subsets - 1;
  for (size_t mask = 1; mask < subsets; ++mask) {
    for (size_t ends = mask; ends != 0; ends &= ends - 1) {
      const int j = std::countr_zero(ends);
      const double here = best[mask * k + j];
      if (here == inf) continue;
      const double* row = &dist[static_cast<size_t>(j) * k];
      for (size_t outside = everyone & ~mask; outside != 0; outside &= outside - 1) {
        const int next = std::countr_zero(outside);
        const size_t slot = (mask | (size_t{1} << next)) * k + next;
        const double candidate = here + row[next];
        if (candidate < best[slot]) {
          best[slot] = candidate;
          previous[slot] = static_cast<signed char>(j);
        }
      }
    }
  }
  const size_t full = everyone;
  int end = 0;
  for (int j = 1; j < k; ++j) {
    if (best[full * k + j] < best[full * k + end]) end = j;
  }
  path.length = best[full * k + end];
  size_t mask = full;
  for (int j = end; j >= 0;) {
    path.order.push_back(j);
    const int before = previous[mask * k + j];
    mask &= ~(size_t{1} << j);
    j = before;
  }
  std::reverse(path.order.begin(), path.order.end());
  return path;
}

namespace {

// Reverse order[i..j] while it shortens the path (ends are free: open path).
bool improve_two_opt(const std::vector<double>& dist, int k, std::vector<int>& order) {
  const int m = static_cast<int>(order.size());
  auto d = [&](int a, int b) { return dist[order[a] * k + order[b]]; };
  bool improved = false;
  for (int i = 0; i < m - 1; ++i) {
    for (int j = i + 1; j < m; ++j) {
      double before = 0, after = 0;
      if (i > 0) before += d(i - 1, i), after += d(i - 1, j);
      if (j < m - 1) before += d(j, j + 1), after += d(i, j + 1);
      if (after < before - 1e-12) {
        std::reverse(order.begin() + i, order.begin() + j + 1);
        improved = true;
      }
    }
  }
  return improved;
}

// Move a segment of 1-3 groups elsewhere while it shortens the path.
bool improve_or_opt(const std::vector<double>& dist, int k, std::vector<int>& order) {
  const int m = static_cast<int>(order.size());
  double current = path_length(dist, k, order);
  bool improved = false;
  for (int length = 1; length <= 3 && length < m; ++length) {
    for (int start = 0; start + length <= m; ++start) {
      std::vector<int> rest(order.begin(), order.begin() + start);
      rest.insert(rest.end(), order.begin() + start + length, order.end());
      for (int at = 0; at <= static_cast<int>(rest.size()); ++at) {
        if (at == start) continue;
        for (int flip = 0; flip < 2; ++flip) {
          std::vector<int> trial(rest.begin(), rest.begin() + at);
          if (flip) {
            trial.insert(trial.end(), order.rbegin() + (m - start - length), order.rbegin() + (m - start));
          } else {
            trial.insert(trial.end(), order.begin() + start, order.begin() + start + length);
          }
          trial.insert(trial.end(), rest.begin() + at, rest.end());
          const double length_after = path_length(dist, k, trial);
          if (length_after < current - 1e-12) {
            order = std::move(trial);
            current = length_after;
            improved = true;
            break;
          }
        }
        if (improved) break;
      }
      if (improved) break;
    }
    if (improved) break;
  }
  return improved;
}

}  // namespace

Path open_path_heuristic(const std::vector<double>& dist, int k) {
  Path best;
  best.exact = false;
  best.length = std::numeric_limits<double>::infinity();
  // A few greedy starts spread over the groups; 2-opt + or-opt polish each.
  const int starts = std::min(k, 4);
  for (int s = 0; s < starts; ++s) {
    const int start = s * k / starts;
    std::vector<int> order{start};
    std::vector<char> used(k, 0);
    used[start] = 1;
    for (int step = 1; step < k; ++step) {
      int nearest = -1;
      for (int g = 0; g < k; ++g) {
        if (!used[g] && (nearest < 0 || dist[order.back() * k + g] < dist[order.back() * k + nearest])) {
          nearest = g;
        }
      }
      used[nearest] = 1;
      order.push_back(nearest);
    }
    for (int round = 0; round < 100; ++round) {
      const bool a = improve_two_opt(dist, k, order);
      const bool b = improve_or_opt(dist, k, order);
      if (!a && !b) break;
    }
    const double length = path_length(dist, k, order);
    if (length < best.length) {
      best.length = length;
      best.order = order;
    }
  }
  if (k == 0) best.length = 0;
  return best;
}

Path open_path(const std::vector<double>& dist, int k, int exact_limit) {
  return k <= std::min(exact_limit, 20) ? open_path_exact(dist, k) : open_path_heuristic(dist, k);
}

}  // namespace geotrain::plan
