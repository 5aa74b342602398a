// How local steps cut a stage into streamed fragments (runtime/local_steps):
// near-equal ranges by hand, and a tied embedding kept whole in fragment 0,
// where both ends of a pipeline synchronise it at the same step.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "geotrain/runtime/local_steps.hpp"

namespace geotrain::runtime {
namespace {

using Bounds = std::vector<std::size_t>;

TEST(LocalStepsFragments, NearEqualRangesByHand) {
  EXPECT_EQ(fragment_bounds(10, 3), (Bounds{0, 3, 6, 10}));
  EXPECT_EQ(fragment_bounds(100, 1), (Bounds{0, 100}));
}

TEST(LocalStepsFragments, TiedEmbeddingStaysWholeInTheFirstFragment) {
  // 100 values in 4 fragments, the first 40 a tied embedding: 0-40, then the rest as before.
  EXPECT_EQ(fragment_bounds(100, 4, 40), (Bounds{0, 40, 50, 75, 100}));
  // An embedding larger than a quarter leaves the fragments it covers empty.
  EXPECT_EQ(fragment_bounds(100, 4, 80), (Bounds{0, 80, 80, 80, 100}));
  // Smaller than a fragment: nothing moves.
  EXPECT_EQ(fragment_bounds(100, 4, 10), fragment_bounds(100, 4));
  EXPECT_EQ(fragment_bounds(50, 2, 70), (Bounds{0, 50, 50}));
}

}  // namespace
}  // namespace geotrain::runtime
