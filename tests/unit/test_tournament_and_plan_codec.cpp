// The probe's round-robin schedule (every pair exactly once, rounds disjoint)
// and the plan's wire encoding (round trip; every corrupted byte rejected).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <span>
#include <string>
#include <stdexcept>
#include <utility>
#include <vector>

#include "geotrain/common/errors.hpp"
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
  EXPECT_THROW(tournament_rounds(0), geotrain::InputError);
  EXPECT_THROW(partner_in_round(4, 4, 0), geotrain::InputError);
  EXPECT_THROW(partner_in_round(4, 0, 3), geotrain::InputError);
  EXPECT_THROW(partner_in_round(4, -1, 0), geotrain::InputError);
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
  EXPECT_EQ(a.tensor_parallel, b.tensor_parallel);
  EXPECT_EQ(a.tensor_groups, b.tensor_groups);
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
      } catch (const geotrain::InputError&) {
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
    } catch (const geotrain::InputError& e) {
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
  bad_sum[36] ^= 1;  // a stage entry (the header is 32 bytes)
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

// Tensor parallel 2 over 12 ranks, 2 x 2 units used, one unit idle:
// units {1, 0}, {3, 2}, {5, 4}, {7, 6}, {9, 8}; ranks 10 and 11 in no group.
Plan tensor_plan() {
  Plan plan;
  plan.pipeline_stages = 2;
  plan.data_parallel = 2;
  plan.tensor_parallel = 2;
  plan.stages = {{3, 0}, {1, 4}};  // unit 2 ({5, 4}) is idle
  for (int u = 0; u < 5; ++u) plan.tensor_groups.push_back({2 * u + 1, 2 * u});
  plan.boundary_s = {0.25};
  plan.cost.datap_s = 1.5;
  plan.cost.pipeline_s = 0.5;
  return plan;
}

// Offsets of the version 2 layout (plan_codec.hpp).
constexpr std::size_t kTensorParallelAt = 24, kGroupCountAt = 28, kStagesAt = 32;

void put_u32_at(std::vector<std::uint8_t>& bytes, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}

// The checksum recomputed, so that a test reaches the checks behind it.
std::vector<std::uint8_t> resealed(std::vector<std::uint8_t> bytes) {
  const std::uint64_t sum = plan_checksum(std::span<const std::uint8_t>(bytes.data(), bytes.size() - 8));
  for (int i = 0; i < 8; ++i) bytes[bytes.size() - 8 + i] = static_cast<std::uint8_t>(sum >> (8 * i));
  return bytes;
}

std::string decode_message(const std::vector<std::uint8_t>& bytes, int expected) {
  try {
    decode_plan(bytes, expected);
  } catch (const geotrain::InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(PlanCodec, TensorParallelRoundTripAndRanksOfUnit) {
  const Plan plan = tensor_plan();
  const auto bytes = encode_plan(plan);
  // Header 32 + 4 stage entries + 5 groups of 2 + 1 boundary + costs + checksum.
  EXPECT_EQ(bytes.size(), 32u + 4 * 4 + 4 * 10 + 8 + 16 + 8);
  EXPECT_EQ(bytes[8], kPlanCodecVersion);
  EXPECT_EQ(kPlanCodecVersion, 2u);
  EXPECT_EQ(bytes[kTensorParallelAt], 2);
  EXPECT_EQ(bytes[kGroupCountAt], 5);
  expect_same_plan(decode_plan(bytes, 12), plan);
  expect_same_plan(decode_plan(bytes, 10), plan);  // 2 x 2 x 2 = 8 used, 10 ranks listed
  EXPECT_EQ(plan.ranks_of_unit(3), (std::vector<int>{7, 6}));
  EXPECT_THROW(plan.ranks_of_unit(5), std::out_of_range);
  Plan plain = sample_plan(2, 2, 3);
  EXPECT_EQ(plain.ranks_of_unit(3), std::vector<int>{3});
  // tp and groups are part of the hash; a plan without them hashes as before.
  Plan other = plan;
  other.tensor_groups[0] = {0, 1};
  EXPECT_NE(other.hash(), plan.hash());
  Plan as_devices = plan;
  as_devices.tensor_parallel = 1;
  as_devices.tensor_groups.clear();
  EXPECT_NE(as_devices.hash(), plan.hash());
}

TEST(PlanCodec, TensorParallelEverySingleByteCorruptionIsRejected) {
  const auto good = encode_plan(tensor_plan());
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (std::uint8_t mask : {0x01, 0x80}) {
      auto bad = good;
      bad[i] ^= mask;
      EXPECT_NE(decode_message(bad, 12), "accepted") << "byte " << i;
    }
  }
}

TEST(PlanCodec, TensorParallelInvalidMessagesNameTheField) {
  const Plan plan = tensor_plan();
  const auto good = encode_plan(plan);
  EXPECT_EQ(decode_message(good, 12), "accepted");
  // pp * dp * t = 8 devices, 7 ranks.
  EXPECT_NE(decode_message(good, 7).find("pp * dp * tensor_parallel = 2 * 2 * 2 = 8, but there are only 7 ranks"),
            std::string::npos);
  // A group device beyond the ranks (9 of group 4 with 9 ranks).
  EXPECT_NE(decode_message(good, 9).find("tensor_groups[4][0] = 9 is not a device id < 9"), std::string::npos);
  // Without an expected count: ids below pp * dp * t = 8, and unit 4 lists 9, 8.
  EXPECT_NE(decode_message(good, -1).find("tensor_groups[4][0]"), std::string::npos);

  // Well-formed messages (valid checksum) that break the contract.
  Plan twice = plan;
  twice.tensor_groups[1] = {3, 1};  // device 1 is in group 0 too
  EXPECT_NE(decode_message(encode_plan(twice), 12).find("tensor_groups[1][1]: device 1 is in two tensor groups"),
            std::string::npos);
  Plan unit_out_of_range = plan;
  unit_out_of_range.stages[1][1] = 5;
  EXPECT_NE(decode_message(encode_plan(unit_out_of_range), 12)
                .find("stages[1][1] = 5 is not a unit id < 5 (the number of tensor groups)"),
            std::string::npos);
  Plan unit_twice = plan;
  unit_twice.stages[1][1] = 3;
  EXPECT_NE(decode_message(encode_plan(unit_twice), 12).find("stages[1][1]: unit 3 appears twice"), std::string::npos);

  // The encoder refuses what it cannot describe.
  Plan short_group = plan;
  short_group.tensor_groups[2] = {5};
  EXPECT_THROW(encode_plan(short_group), geotrain::InputError);
  Plan groups_without_tp = plan;
  groups_without_tp.tensor_parallel = 1;
  EXPECT_THROW(encode_plan(groups_without_tp), geotrain::InputError);
  Plan tp_without_groups = plan;
  tp_without_groups.tensor_groups.clear();
  EXPECT_THROW(encode_plan(tp_without_groups), geotrain::InputError);

  // Crafted headers, resealed: t = 0; groups with t = 1; t > 1 without groups;
  // a group count that disagrees with the length; t = 3 with the same bytes
  // (group size = t is structural: a length error); last, a stage entry
  // rewritten in place to an out-of-range unit.
  struct Crafted {
    std::size_t at;
    std::uint32_t value;
    const char* says;
  };
  for (const Crafted& c : {Crafted{kTensorParallelAt, 0, "tensor_parallel = 0 out of range"},
                           Crafted{kTensorParallelAt, 1, "tensor_groups: 5 groups with tensor_parallel = 1"},
                           Crafted{kGroupCountAt, 0, "tensor_groups: group count 0"},
                           Crafted{kGroupCountAt, 4, "length"},
                           Crafted{kTensorParallelAt, 3, "length"},
                           Crafted{kStagesAt, 77, "stages[0][0] = 77 is not a unit id"}}) {
    auto bytes = good;
    put_u32_at(bytes, c.at, c.value);
    EXPECT_NE(decode_message(resealed(bytes), 12).find(c.says), std::string::npos)
        << "offset " << c.at << " = " << c.value << ": " << decode_message(resealed(bytes), 12);
  }
}

}  // namespace
