#include "geotrain/plan/bottleneck_matching.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

namespace geotrain::plan {
namespace {

// The search stack holds rows start..rows[depth]; each row below the top was
// entered through the column the row above it is matched to. Matching
// rows[depth] to the free `column` and shifting every row on the stack to
// the column of the next one grows the matching by one.
void flip_augmenting_path(const int* rows, int depth, int column, int* column_of_row, int* row_of_column) {
  for (int level = depth; level >= 0; --level) {
    const int row = rows[level];
    const int previous = column_of_row[row];
    column_of_row[row] = column;
    row_of_column[column] = row;
    column = previous;
  }
}

// Augmenting-path search state for one threshold. Rows are "left", columns
// "right"; an edge (r, c) exists while cost[r][c] <= threshold.
struct Matcher {
  const double* cost = nullptr;
  int n = 0;
  double threshold = 0;
  std::vector<int> column_of_row, row_of_column;
  std::vector<char> row_seen, column_seen;
  std::vector<int> stack_row, stack_next;

  // Reuses the buffers: the search calls this millions of times.
  void reset(const double* c, int size) {
    cost = c;
    n = size;
    threshold = 0;
    column_of_row.assign(size, -1);
    row_of_column.assign(size, -1);
    row_seen.resize(size);
    column_seen.resize(size);
    stack_row.resize(size);
    stack_next.resize(size);
  }

  // Iterative DFS for an augmenting path from free row `start`; flips it on success.
  bool augment(int start) {
    std::fill(row_seen.begin(), row_seen.end(), 0);
    std::fill(column_seen.begin(), column_seen.end(), 0);
    int depth = 0;
    stack_row[0] = start;
    stack_next[0] = 0;
    row_seen[start] = 1;
    while (depth >= 0) {
      const int r = stack_row[depth];
      int& c = stack_next[depth];
      bool descended = false;
      for (; c < n; ++c) {
        if (column_seen[c] || cost[r * n + c] > threshold) continue;
        column_seen[c] = 1;
        const int owner = row_of_column[c];
        if (owner < 0) {  // free column: flip the path start..r, c
          flip_augmenting_path(stack_row.data(), depth, c, column_of_row.data(), row_of_column.data());
          return true;
        }
        if (!row_seen[owner]) {
          row_seen[owner] = 1;
          ++c;
          ++depth;
          stack_row[depth] = owner;
          stack_next[depth] = 0;
          descended = true;
          break;
        }
      }
      if (!descended) --depth;
    }
    return false;
  }

  // Cheapest edge leaving the alternating tree of the last failed search:
  // from a reached row to an unreached column. No smaller threshold can make
  // that search succeed, so raising to it keeps the threshold a lower bound.
  double next_threshold() const {
    double best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < n; ++r) {
      if (!row_seen[r]) continue;
      for (int c = 0; c < n; ++c) {
        if (!column_seen[c]) best = std::min(best, cost[r * n + c]);
      }
    }
    return best;
  }
};

// Every row and every column must use at least its cheapest edge.
double trivial_lower_bound(const double* cost, int n) {
  double bound = -std::numeric_limits<double>::infinity();
  std::vector<double> column_min(n, std::numeric_limits<double>::infinity());
  for (int r = 0; r < n; ++r) {
    double row_min = std::numeric_limits<double>::infinity();
    for (int c = 0; c < n; ++c) {
      const double x = cost[r * n + c];
      row_min = std::min(row_min, x);
      column_min[c] = std::min(column_min[c], x);
    }
    bound = std::max(bound, row_min);
  }
  for (double x : column_min) bound = std::max(bound, x);
  return bound;
}

// The same algorithm for n <= 64 with each row's edges at the current
// threshold as one 64-bit word: the search inside the planner's loop runs
// millions of these, and the bit version is several times faster.
struct SmallMatcher {
  const double* cost = nullptr;
  int n = 0;
  double threshold = 0;
  std::uint64_t adjacency[64];
  int column_of_row[64], row_of_column[64], stack_row[64];
  std::uint64_t rows_seen = 0, columns_seen = 0;

  void build_adjacency() {
    for (int r = 0; r < n; ++r) {
      std::uint64_t mask = 0;
      for (int c = 0; c < n; ++c) mask |= static_cast<std::uint64_t>(cost[r * n + c] <= threshold) << c;
      adjacency[r] = mask;
    }
  }

  bool augment(int start) {
    rows_seen = std::uint64_t{1} << start;
    columns_seen = 0;
    int depth = 0;
    stack_row[0] = start;
    while (depth >= 0) {
      const int r = stack_row[depth];
      const std::uint64_t open = adjacency[r] & ~columns_seen;
      if (!open) {
        --depth;
        continue;
      }
      const int c = std::countr_zero(open);
      columns_seen |= std::uint64_t{1} << c;
      const int owner = row_of_column[c];
      if (owner < 0) {
        flip_augmenting_path(stack_row, depth, c, column_of_row, row_of_column);
        return true;
      }
      if (!(rows_seen >> owner & 1)) {
        rows_seen |= std::uint64_t{1} << owner;
        stack_row[++depth] = owner;
      }
    }
    return false;
  }

  double next_threshold() const {
    double best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < n; ++r) {
      if (!(rows_seen >> r & 1)) continue;
      for (int c = 0; c < n; ++c) {
        if (!(columns_seen >> c & 1)) best = std::min(best, cost[r * n + c]);
      }
    }
    return best;
  }

  void solve(const double* c, int size) {
    cost = c;
    n = size;
    threshold = trivial_lower_bound(cost, n);
    build_adjacency();
    std::uint64_t free_columns = n == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n) - 1;
    for (int r = 0; r < n; ++r) row_of_column[r] = -1;
    for (int r = 0; r < n; ++r) {
      column_of_row[r] = -1;
      const std::uint64_t open = adjacency[r] & free_columns;
      if (!open) continue;
      const int col = std::countr_zero(open);
      column_of_row[r] = col;
      row_of_column[col] = r;
      free_columns &= ~(std::uint64_t{1} << col);
    }
    for (int r = 0; r < n; ++r) {
      if (column_of_row[r] >= 0) continue;
      while (!augment(r)) {
        threshold = next_threshold();
        build_adjacency();
      }
    }
  }
};

const Matcher& solve(const double* cost, int n) {
  thread_local Matcher m;
  m.reset(cost, n);
  m.threshold = trivial_lower_bound(cost, n);
  // Greedy start: cheap and usually matches most rows at the lower bound.
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c) {
      if (m.row_of_column[c] < 0 && cost[r * n + c] <= m.threshold) {
        m.column_of_row[r] = c;
        m.row_of_column[c] = r;
        break;
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    if (m.column_of_row[r] >= 0) continue;
    while (!m.augment(r)) m.threshold = m.next_threshold();
  }
  return m;
}

}  // namespace

Matching bottleneck_matching(const double* cost, int n) {
  Matching result;
  if (n == 0) return result;
  if (n <= 64) {
    thread_local SmallMatcher small;
    small.solve(cost, n);
    result.partner.assign(small.column_of_row, small.column_of_row + n);
  } else {
    result.partner = solve(cost, n).column_of_row;
  }
  result.bottleneck = -std::numeric_limits<double>::infinity();
  for (int r = 0; r < n; ++r) {
    result.bottleneck = std::max(result.bottleneck, cost[r * n + result.partner[r]]);
  }
  return result;
}

double bottleneck_value(const double* cost, int n) {
  if (n == 0) return 0;
  double value = -std::numeric_limits<double>::infinity();
  if (n <= 64) {
    thread_local SmallMatcher small;
    small.solve(cost, n);
    for (int r = 0; r < n; ++r) value = std::max(value, cost[r * n + small.column_of_row[r]]);
  } else {
    const Matcher& m = solve(cost, n);
    for (int r = 0; r < n; ++r) value = std::max(value, cost[r * n + m.column_of_row[r]]);
  }
  return value;
}

}  // namespace geotrain::plan
