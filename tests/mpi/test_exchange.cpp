// The direct-exchange sums (mpi_exchange.hpp) against a brute-force sum:
// every rank can generate every member's contribution, folds them in rank
// order, and must find exactly those bits, for groups of 1 to all ranks and
// counts that do not divide into equal shards.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <random>
#include <vector>

#include "geotrain/mpi/mpi_check.hpp"
#include "geotrain/job/mpi_exchange.hpp"
#include "geotrain/runtime/wire_codec.hpp"

namespace {

using namespace geotrain::runtime;
using geotrain::WireFormat;

std::vector<float> contribution(int member, std::size_t count, int salt) {
  std::mt19937 rng(static_cast<std::uint32_t>(1000 * member + salt));
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  std::vector<float> data(count);
  for (float& x : data) x = value(rng);
  return data;
}

// The first `size` world ranks, as a group (the others get MPI_COMM_NULL).
struct FirstRanks {
  explicit FirstRanks(int size) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    GT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &group.comm));
    for (int r = 0; r < size; ++r) group.world_ranks.push_back(r);
    group.deadline_s = 30;
    group.what = "the exchange test";
  }
  ~FirstRanks() {
    if (group.comm != MPI_COMM_NULL) MPI_Comm_free(&group.comm);
  }
  ExchangeGroup group;
};

TEST(DirectExchange, SumsEqualTheRankOrderFoldOnEveryMember) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (int size = 1; size <= world; ++size) {
    FirstRanks first(size);
    if (first.group.comm == MPI_COMM_NULL) continue;
    int self = 0;
    MPI_Comm_rank(first.group.comm, &self);
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{4099}}) {
      const int salt = static_cast<int>(count) + 17 * size;
      std::vector<float> data = contribution(self, count, salt);
      double values[2] = {0.25 * self + 1e-9 * static_cast<double>(count), -1.0 / (self + 3)};
      exchange_sum(first.group, data.data(), count, values, 2);
      std::vector<float> expected = contribution(0, count, salt);
      double expected_values[2] = {1e-9 * static_cast<double>(count), -1.0 / 3};
      for (int member = 1; member < size; ++member) {
        const std::vector<float> other = contribution(member, count, salt);
        for (std::size_t i = 0; i < count; ++i) expected[i] += other[i];
        expected_values[0] += 0.25 * member + 1e-9 * static_cast<double>(count);
        expected_values[1] += -1.0 / (member + 3);
      }
      for (std::size_t i = 0; i < count; ++i) {
        ASSERT_EQ(data[i], expected[i]) << "group of " << size << ", count " << count << ", element " << i;
      }
      EXPECT_EQ(values[0], expected_values[0]) << "group of " << size;
      EXPECT_EQ(values[1], expected_values[1]) << "group of " << size;
    }
  }
}

// The last stage's half of the tied embedding: started, another sum on
// another group meanwhile, then finished.
TEST(DirectExchange, APairSumFinishesAfterAnotherExchange) {
  int world = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ASSERT_GE(world, 2);
  FirstRanks pair(2), all(world);
  std::vector<float> half;
  ExchangeInFlight pending;
  if (pair.group.comm != MPI_COMM_NULL) {
    half = contribution(rank, 301, 5);
    pending.start(pair.group, 0, half.data(), half.size(), nullptr, 0, nullptr, nullptr);
  }
  double value = 1.0;
  exchange_sum(all.group, nullptr, 0, &value, 1);
  EXPECT_EQ(value, static_cast<double>(world));
  if (pair.group.comm != MPI_COMM_NULL) {
    pending.finish();
    EXPECT_TRUE(pending.progress());  // done
    const std::vector<float> a = contribution(0, 301, 5), b = contribution(1, 301, 5);
    for (std::size_t i = 0; i < half.size(); ++i) ASSERT_EQ(half[i], a[i] + b[i]) << "element " << i;
  }
}

// Buckets of one step: a buffer cut into uneven pieces, all in flight at
// once and advanced by polling in turn (the overlapped gradient sum). fp32:
// the same bits as one exchange of the whole buffer. int8 with error
// feedback: every member ends with the same bits, near the exact sum.
TEST(DirectExchange, BucketsInFlightTogetherEqualOneWholeSum) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::size_t cuts[] = {0, 5, 700, 701, 2049, 4099};
  for (int size = 2; size <= world; ++size) {
    FirstRanks first(size);
    if (first.group.comm == MPI_COMM_NULL) continue;
    int self = 0;
    MPI_Comm_rank(first.group.comm, &self);
    for (const WireFormat format : {WireFormat::fp32, WireFormat::int8}) {
      const WireCodec codec{format, 64, 0.01};
      std::vector<float> whole = contribution(self, 4099, 3 + size), buckets = whole;
      std::vector<EncodedSumState> states(std::size(cuts));
      EncodedSumState whole_state;
      if (format == WireFormat::fp32) exchange_sum(first.group, whole.data(), whole.size());
      else exchange_sum_encoded(first.group, codec, whole_state, whole.data(), whole.size());
      std::vector<ExchangeInFlight> flights(std::size(cuts) - 1);
      for (std::size_t b = flights.size(); b-- > 0;) {  // backward order, as the backward produces them
        flights[b].start(first.group, 8 * static_cast<int>(b + 1), buckets.data() + cuts[b], cuts[b + 1] - cuts[b],
                         nullptr, 0, format == WireFormat::fp32 ? nullptr : &codec, &states[b]);
      }
      for (bool all_done = false; !all_done;) {
        all_done = true;
        for (ExchangeInFlight& flight : flights) all_done = flight.progress() && all_done;
      }
      for (ExchangeInFlight& flight : flights) flight.finish();  // a no-op once done
      std::vector<float> lowest(buckets.size()), highest(buckets.size());
      MPI_Allreduce(buckets.data(), lowest.data(), static_cast<int>(buckets.size()), MPI_FLOAT, MPI_MIN, first.group.comm);
      MPI_Allreduce(buckets.data(), highest.data(), static_cast<int>(buckets.size()), MPI_FLOAT, MPI_MAX, first.group.comm);
      for (std::size_t i = 0; i < buckets.size(); ++i) {
        ASSERT_EQ(lowest[i], highest[i]) << "members differ: group of " << size << ", element " << i;
        if (format == WireFormat::fp32) {
          ASSERT_EQ(buckets[i], whole[i]) << "group of " << size << ", element " << i;
        } else {
          ASSERT_NEAR(buckets[i], whole[i], 0.1f * size) << "group of " << size << ", element " << i;
        }
      }
    }
  }
}

}  // namespace
