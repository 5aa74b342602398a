// Bottleneck perfect matching between two equal-sized device groups:
// minimise the largest link cost used (reference §2.3, §2.5.1, §8.4).
#pragma once
#include <vector>

namespace geotrain::plan {

struct Matching {
  double bottleneck = 0;        // max over the matching's links: the optimum
  std::vector<int> partner;     // partner[i] = column matched to row i
};

// `cost` is rows*rows, row-major. Increases a threshold only when the
// alternating tree of a free row cannot grow below it, raising it to the
// cheapest edge that lets it grow, so every threshold visited is a lower bound
// and the first perfect matching found is optimal. O(n^3) worst case.
Matching bottleneck_matching(const double* cost, int n);

// Same value, no matching: used inside the search.
double bottleneck_value(const double* cost, int n);

}  // namespace geotrain::plan
