// The probe's round-robin schedule (every pair exactly once, rounds disjoint)
// and the plan's wire encoding (round trip; every corrupted byte rejected).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "geotrain/plan/cost_model.hpp"
#include "geotrain/plan/plan.hpp"
#include "geotrain/plan/plan_codec.hpp"
#include "geotrain/plan/search.hpp"
#include "geotrain/plan/tournament.hpp"
#include "plan_test_support.hpp"

namespace {

using namespace geotrain::plan;

TEST(Tournament, EveryPairExactlyOnceAndRoundsDisjoint) {
  for (int n = 1; n <= 17; ++n) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto schedule = round_robin_schedule(n);
    ASSERT_EQ(static_cast<int>(schedule.size()), n % 2 == 0 ? n - 1 : n);
    ASSERT_EQ(tournament_rounds(n), static_cast<int>(schedule.size()));
    std::set<std::pair<int, int>> met;
    for (int r = 0; r < static_cast<int>(schedule.size()); ++r) {
      std::set<int> busy;
      EXPECT_EQ(static_cast<int>(schedule[r].size()), n / 2) << "round " << r;
      for (auto [a, b] : schedule[r]) {
        ASSERT_LT(a, b);
        ASSERT_GE(a, 0);
        ASSERT_LT(b, n);
        EXPECT_TRUE(busy.insert(a).second) << "rank " << a << " twice in round " << r;
        EXPECT_TRUE(busy.insert(b).second) << "rank " << b << " twice in round " << r;
        EXPECT_TRUE(met.insert({a, b}).second) << "pair " << a << "," << b << " meets twice";
      }
    }
    EXPECT_EQ(static_cast<int>(met.size()), n * (n - 1) / 2);
  }
}

TEST(Tournament, PartnerIsSymmetricAndMatchesTheSchedule) {
  for (int n = 1; n <= 17; ++n) {
    const auto schedule = round_robin_schedule(n);
    for (int r = 0; r < tournament_rounds(n); ++r) {
      int byes = 0;
      for (int x = 0; x < n; ++x) {
        const int p = partner_in_round(n, x, r);
        if (p < 0) {
          ++byes;
          continue;
        }
        EXPECT_NE(p, x);
        EXPECT_EQ(partner_in_round(n, p, r), x) << "n " << n << " round " << r;
      }
      EXPECT_EQ(byes, n % 2) << "n " << n << " round " << r;
    }
  }
}

TEST(Tournament, RejectsOutOfRange) {
  EXPECT_THROW(tournament_rounds(0), std::invalid_argument);
  EXPECT_THROW(partner_in_round(4, 4, 0), std::invalid_argument);
  EXPECT_THROW(partner_in_round(4, 0, 3), std::invalid_argument);
  EXPECT_THROW(partner_in_round(4, -1, 0), std::invalid_argument);
}

Plan sample_plan(int pp, int dp, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Network net = geotrain::plan::testing::random_network(pp * dp, rng, false);
  Workload w;
  w.pipeline_stages = pp;
  w.data_parallel = dp;
  w.c_dp_bytes = 1e9;
  w.c_pp_bytes = 1e8;
  const CostModel model(net, w);
  SearchOptions options;
  options.seed = seed;
  options.candidates = 50;
  return search_plan(model, options).plan;
}

void expect_same_plan(const Plan& a, const Plan& b) {
  EXPECT_EQ(a.pipeline_stages, b.pipeline_stages);
  EXPECT_EQ(a.data_parallel, b.data_parallel);
  EXPECT_EQ(a.stages, b.stages);
  EXPECT_EQ(a.boundary_s, b.boundary_s);
  EXPECT_EQ(a.cost.datap_s, b.cost.datap_s);
  EXPECT_EQ(a.cost.pipeline_s, b.cost.pipeline_s);
  EXPECT_EQ(a.hash(), b.hash());
}

TEST(PlanCodec, RoundTripIsExact) {
  for (auto [pp, dp] : std::vector<std::pair<int, int>>{{1, 1}, {2, 2}, {4, 2}, {3, 5}, {8, 8}}) {
    const Plan plan = sample_plan(pp, dp, 11u + pp * 31u + dp);
    const auto bytes = encode_plan(plan);
    expect_same_plan(decode_plan(bytes, pp * dp), plan);
    expect_same_plan(decode_plan(bytes), plan);
  }
}

TEST(PlanCodec, EverySingleByteCorruptionIsRejected) {
  const Plan plan = sample_plan(4, 3, 5);
  const auto good = encode_plan(plan);
  int rejected = 0, identical = 0;
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (std::uint8_t mask : {0x01, 0x10, 0x80, 0xff}) {
      auto bad = good;
      bad[i] ^= mask;
      try {
        const Plan decoded = decode_plan(bad, 12);
        expect_same_plan(decoded, plan);  // acceptable only if nothing changed
        ++identical;
      } catch (const std::invalid_argument&) {
        ++rejected;
      }
    }
  }
  EXPECT_EQ(identical, 0);  // the checksum catches every single-byte change
  EXPECT_EQ(rejected, static_cast<int>(good.size()) * 4);
}

TEST(PlanCodec, RejectsWithAMessageNamingTheField) {
  const Plan plan = sample_plan(2, 2, 3);
  const auto good = encode_plan(plan);
  auto message = [](std::vector<std::uint8_t> bytes, int expected) -> std::string {
    try {
      decode_plan(bytes, expected);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(message(good, 4), "accepted");
  EXPECT_NE(message({good.begin(), good.begin() + 10}, 4).find("truncated"), std::string::npos);
  auto bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_NE(message(bad_magic, 4).find("magic"), std::string::npos);
  auto bad_version = good;
  bad_version[8] = 9;
  EXPECT_NE(message(bad_version, 4).find("version"), std::string::npos);
  auto longer = good;
  longer.push_back(0);
  EXPECT_NE(message(longer, 4).find("length"), std::string::npos);
  auto bad_sum = good;
  bad_sum[30] ^= 1;
  EXPECT_NE(message(bad_sum, 4).find("checksum"), std::string::npos);
  EXPECT_NE(message(good, 3).find("only 3 ranks"), std::string::npos);
  EXPECT_EQ(message(good, 6), "accepted");  // two ranks left idle

  // A well-formed message (valid checksum) that lists a device twice.
  Plan duplicate = plan;
  duplicate.stages[1][1] = duplicate.stages[0][0];
  EXPECT_NE(message(encode_plan(duplicate), 4).find("appears twice"), std::string::npos);
  Plan out_of_range = plan;
  out_of_range.stages[0][0] = 7;
  EXPECT_NE(message(encode_plan(out_of_range), 4).find("not a device id"), std::string::npos);
  Plan negative_cost = plan;
  negative_cost.cost.datap_s = -1;
  EXPECT_NE(message(encode_plan(negative_cost), 4).find("cost.datap_s"), std::string::npos);
}

}  // namespace
