// Cutting the layers into stages.
#include <gtest/gtest.h>

#include "geotrain/common/errors.hpp"
#include "geotrain/model/stage_split.hpp"

namespace geotrain::model {
namespace {

TEST(StageSplit, EvenSplitGivesTheRemainderToTheFirstStages) {
  const auto specs = split_layers(10, 4);  // 3 3 2 2
  ASSERT_EQ(specs.size(), 4u);
  const int expected[][2] = {{0, 3}, {3, 6}, {6, 8}, {8, 10}};
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(specs[s].first_layer, expected[s][0]);
    EXPECT_EQ(specs[s].last_layer, expected[s][1]);
    EXPECT_EQ(specs[s].has_embedding, s == 0);
    EXPECT_EQ(specs[s].has_head, s == 3);
  }
  const auto single = split_layers(4, 1);
  EXPECT_TRUE(single[0].has_embedding && single[0].has_head);
  EXPECT_EQ(single[0].last_layer, 4);
}

TEST(StageSplit, ExplicitCountsIncludingAnEmptyHeadStage) {
  const auto specs = split_layers(4, 3, {3, 1, 0});
  EXPECT_EQ(specs[1].first_layer, 3);
  EXPECT_EQ(specs[2].first_layer, 4);
  EXPECT_EQ(specs[2].last_layer, 4);
  EXPECT_TRUE(specs[2].has_head);
}

TEST(StageSplit, BadCountsAreRejected) {
  EXPECT_THROW(split_layers(4, 2, {3, 2}), InputError);
  EXPECT_THROW(split_layers(4, 2, {4}), InputError);
  EXPECT_THROW(split_layers(4, 2, {5, -1}), InputError);
  EXPECT_THROW(split_layers(4, 0), InputError);
  EXPECT_THROW(split_layers(4, 5), InputError);  // an even split would leave a stage empty
  EXPECT_EQ(split_layers(4, 4).back().last_layer, 4);       // one layer each is fine
}

}  // namespace
}  // namespace geotrain::model
