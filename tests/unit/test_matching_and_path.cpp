// Bottleneck matching and open-path TSP against brute force.
#include <gtest/gtest.h>

#include "geotrain/plan/bottleneck_matching.hpp"
#include "geotrain/plan/open_path.hpp"
#include "plan_test_support.hpp"

namespace geotrain::plan {
namespace {

double brute_force_bottleneck(const std::vector<double>& cost, int n) {
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  double best = std::numeric_limits<double>::infinity();
  do {
    double worst = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < n; ++i) worst = std::max(worst, cost[i * n + perm[i]]);
    best = std::min(best, worst);
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}

double brute_force_path(const std::vector<double>& dist, int k) {
  std::vector<int> order(k);
  std::iota(order.begin(), order.end(), 0);
  double best = std::numeric_limits<double>::infinity();
  do best = std::min(best, path_length(dist, k, order));
  while (std::next_permutation(order.begin(), order.end()));
  return best;
}

TEST(BottleneckMatching, AgreesWithBruteForceOnRandomInstances) {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 600; ++trial) {
    const int n = 1 + trial % 7;
    // Few distinct values half of the time: ties are where threshold logic breaks.
    std::uniform_int_distribution<int> small(0, 4);
    std::uniform_real_distribution<double> real(0.0, 100.0);
    std::vector<double> cost(n * n);
    for (auto& c : cost) c = trial % 2 ? small(rng) : real(rng);
    const Matching m = bottleneck_matching(cost.data(), n);
    ASSERT_EQ(m.bottleneck, brute_force_bottleneck(cost, n)) << "trial " << trial;
    // The matching returned is a permutation that achieves the value.
    std::vector<int> seen(n, 0);
    double worst = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < n; ++i) {
      ASSERT_GE(m.partner[i], 0);
      ASSERT_LT(m.partner[i], n);
      ++seen[m.partner[i]];
      worst = std::max(worst, cost[i * n + m.partner[i]]);
    }
    EXPECT_EQ(*std::min_element(seen.begin(), seen.end()), 1) << "trial " << trial;
    EXPECT_EQ(worst, m.bottleneck) << "trial " << trial;
  }
}

// Sizes on both sides of the 64-row bit-parallel path, random and clustered
// costs: the matching is a permutation achieving the value, and the value is
// optimal (certificate: with only the edges strictly below it, even the
// general path finds no perfect matching: a 0/1 instance has value 1).
TEST(BottleneckMatching, LargeInstancesAreOptimalAndAchieved) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> real(0.0, 1.0);
  for (int n : {31, 63, 64, 65, 100}) {
    for (int clustered = 0; clustered < 2; ++clustered) {
      std::vector<double> cost(n * n);
      for (int r = 0; r < n; ++r) {
        for (int c = 0; c < n; ++c) cost[r * n + c] = clustered ? std::floor(4 * real(rng)) + ((r % 4) != (c % 4)) * 3 : real(rng);
      }
      const Matching m = bottleneck_matching(cost.data(), n);
      ASSERT_EQ(bottleneck_value(cost.data(), n), m.bottleneck);
      std::vector<int> seen(n, 0);
      double worst = -1;
      for (int i = 0; i < n; ++i) ++seen[m.partner[i]], worst = std::max(worst, cost[i * n + m.partner[i]]);
      EXPECT_EQ(*std::min_element(seen.begin(), seen.end()), 1) << n;
      EXPECT_EQ(worst, m.bottleneck) << n;
      std::vector<double> strict(cost);
      for (auto& c : strict) c = c < m.bottleneck ? 0.0 : 1.0;
      EXPECT_EQ(bottleneck_value(strict.data(), n), 1.0) << n;
    }
  }
}

TEST(OpenPath, HeldKarpAgreesWithBruteForce) {
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<double> real(0.0, 10.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int k = 1 + trial % 8;
    std::vector<double> dist(k * k, 0.0);
    for (int a = 0; a < k; ++a) {
      for (int b = a + 1; b < k; ++b) dist[a * k + b] = dist[b * k + a] = trial % 3 ? real(rng) : std::floor(real(rng));
    }
    const Path path = open_path_exact(dist, k);
    ASSERT_NEAR(path.length, brute_force_path(dist, k), 1e-9) << "trial " << trial;
    ASSERT_EQ(static_cast<int>(path.order.size()), k);
    EXPECT_NEAR(path_length(dist, k, path.order), path.length, 1e-9);
    std::vector<int> sorted = path.order;
    std::sort(sorted.begin(), sorted.end());
    for (int g = 0; g < k; ++g) EXPECT_EQ(sorted[g], g);
  }
}

TEST(OpenPath, HeuristicIsValidAndNearExactAtSixteenGroups) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> real(1.0, 10.0);
  const int k = 16;
  std::vector<double> dist(k * k, 0.0);
  for (int a = 0; a < k; ++a) {
    for (int b = a + 1; b < k; ++b) dist[a * k + b] = dist[b * k + a] = real(rng);
  }
  const Path exact = open_path_exact(dist, k);
  const Path heuristic = open_path_heuristic(dist, k);
  EXPECT_GE(heuristic.length, exact.length - 1e-9);
  EXPECT_LE(heuristic.length, exact.length * 1.25);
  EXPECT_NEAR(path_length(dist, k, heuristic.order), heuristic.length, 1e-9);
  EXPECT_NEAR(path_length(dist, k, exact.order), exact.length, 1e-9);
}

}  // namespace
}  // namespace geotrain::plan
