// Shortest Hamiltonian path (open: no return edge, any start) over the
// stage groups (reference §2.3, §8.5).
#pragma once
#include <vector>

namespace geotrain::plan {

struct Path {
  double length = 0;
  std::vector<int> order;  // group indices in pipeline order
  bool exact = true;
};

// Held-Karp dynamic programme, O(2^k k^2) time and 2^k k memory; k <= 20.
Path open_path_exact(const std::vector<double>& dist, int k);
// Greedy starts + 2-opt + or-opt; for any k.
Path open_path_heuristic(const std::vector<double>& dist, int k);
// Exact up to `exact_limit` groups, heuristic beyond.
Path open_path(const std::vector<double>& dist, int k, int exact_limit = 16);
// Length of a given order.
double path_length(const std::vector<double>& dist, int k, const std::vector<int>& order);

}  // namespace geotrain::plan
