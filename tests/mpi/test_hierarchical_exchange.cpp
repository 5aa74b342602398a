// The hierarchical data-parallel sum (hierarchical_exchange.hpp) against a
// brute-force fold in its documented order (each site's members in replica
// order, then the sites' sums in order of their first replica), and against
// the flat exchange on the same group: fp32 must give exactly those bits on
// every member, for sites of equal sizes (striped), unequal sizes (site
// leaders), one site, one replica per site, and groups that leave ranks out.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "geotrain/job/hierarchical_exchange.hpp"
#include "geotrain/mpi/mpi_plan.hpp"

namespace {

using namespace geotrain;
using namespace geotrain::runtime;

std::vector<float> contribution(int replica, std::size_t count, int salt) {
  std::mt19937 rng(static_cast<std::uint32_t>(7919 * replica + salt));
  // Magnitudes apart by orders, so that a different order of the adds shows in the bits.
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = value(rng) * (i % 3 == 0 ? 1e4f : i % 3 == 1 ? 1.0f : 1e-3f);
  return data;
}

struct Layout {
  std::vector<int> replicas;         // world rank of each replica (one stage)
  std::vector<std::string> site_of;  // per world rank
};

// The sum in the documented order, from every replica's contribution.
std::vector<float> site_order_fold(const Layout& layout, std::size_t count, int salt) {
  std::vector<std::string> sites;  // in order of first replica
  for (int rank : layout.replicas) {
    const std::string& site = layout.site_of[static_cast<std::size_t>(rank)];
    if (std::find(sites.begin(), sites.end(), site) == sites.end()) sites.push_back(site);
  }
  std::vector<float> total(count, 0.0f);
  for (std::size_t s = 0; s < sites.size(); ++s) {
    std::vector<float> partial;
    for (std::size_t r = 0; r < layout.replicas.size(); ++r) {
      if (layout.site_of[static_cast<std::size_t>(layout.replicas[r])] != sites[s]) continue;
      const std::vector<float> x = contribution(static_cast<int>(r), count, salt);
      if (partial.empty()) {
        partial = x;
      } else {
        for (std::size_t i = 0; i < count; ++i) partial[i] += x[i];
      }
    }
    for (std::size_t i = 0; i < count; ++i) total[i] = s == 0 ? partial[i] : total[i] + partial[i];
  }
  return total;
}

std::vector<Layout> layouts() {
  return {
      {{0, 1, 2, 3}, {"a", "a", "b", "b"}},  // two sites of two: two stripes
      {{0, 1, 2, 3}, {"a", "b", "a", "b"}},  // interleaved: the site order differs from the replica order
      {{3, 1, 2, 0}, {"a", "b", "a", "b"}},  // replicas not in rank order
      {{0, 1, 2, 3}, {"a", "a", "a", "b"}},  // unequal: site leaders
      {{0, 1, 2, 3}, {"a", "b", "b", "c"}},  // unequal, three sites
      {{0, 1, 2, 3}, {"a", "a", "a", "a"}},  // one site
      {{0, 1, 2, 3}, {"a", "b", "c", "d"}},  // one replica per site
      {{0, 1, 2}, {"a", "a", "b", "x"}},     // rank 3 left out
      {{2, 0}, {"a", "x", "b", "y"}},        // two replicas, two sites
  };
}

std::string describe(const Layout& layout) {
  std::string text = "replicas";
  for (int r : layout.replicas) text += " " + std::to_string(r) + "@" + layout.site_of[static_cast<std::size_t>(r)];
  return text;
}

TEST(HierarchicalExchange, Fp32GivesTheSiteOrderFoldAndTheFlatExchangesBits) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ASSERT_EQ(world, 4) << "run with 4 ranks";
  bool order_matters = false;  // the test can fail: some layout's fold differs from the replica-order fold
  for (const Layout& layout : layouts()) {
    plan::Plan p;
    p.pipeline_stages = 1;
    p.data_parallel = static_cast<int>(layout.replicas.size());
    p.stages = {layout.replicas};
    const Topology t = make_topology(MPI_COMM_WORLD, p, 20, layout.site_of);
    if (t.idle) continue;
    const SiteLanes lanes = site_lanes(t, 20);
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{4099}}) {
      const int salt = static_cast<int>(count);
      std::vector<float> hierarchical = contribution(t.replica, count, salt), flat = hierarchical;
      double values[2] = {0.1 * t.replica, 1e-17 * (t.replica + 1)}, flat_values[2] = {values[0], values[1]};
      exchange_sum_hierarchical(lanes, hierarchical.data(), count, values, 2);
      exchange_sum(lanes.whole, flat.data(), count, flat_values, 2);
      const std::vector<float> expected = site_order_fold(layout, count, salt);
      std::vector<float> replica_order = contribution(0, count, salt);
      for (int r = 1; r < p.data_parallel; ++r) {
        const std::vector<float> x = contribution(r, count, salt);
        for (std::size_t i = 0; i < count; ++i) replica_order[i] += x[i];
      }
      for (std::size_t i = 0; i < count; ++i) {
        ASSERT_EQ(hierarchical[i], expected[i]) << describe(layout) << ", count " << count << ", element " << i;
        ASSERT_EQ(flat[i], expected[i]) << describe(layout) << ", count " << count << ", element " << i;
        order_matters = order_matters || expected[i] != replica_order[i];
      }
      EXPECT_EQ(values[0], flat_values[0]) << describe(layout);
      EXPECT_EQ(values[1], flat_values[1]) << describe(layout);
    }
  }
  EXPECT_TRUE(order_matters) << "no layout's fold differed from the replica-order fold";
}

// Buckets of one step, all in flight at once and advanced by polling in
// turn (the overlapped gradient sum), striped and by leaders. fp32: the bits
// of one whole sum. int8 (only the traffic across sites encoded, with error
// feedback): every member ends with the same bits, near the exact sum.
TEST(HierarchicalExchange, BucketsInFlightTogetherEqualOneWholeSum) {
  const std::size_t cuts[] = {0, 5, 700, 701, 2049, 4099};
  for (const Layout& layout : {layouts()[0], layouts()[1], layouts()[3]}) {
    plan::Plan p;
    p.pipeline_stages = 1;
    p.data_parallel = static_cast<int>(layout.replicas.size());
    p.stages = {layout.replicas};
    const Topology t = make_topology(MPI_COMM_WORLD, p, 20, layout.site_of);
    const SiteLanes lanes = site_lanes(t, 20);
    for (const WireFormat format : {WireFormat::fp32, WireFormat::int8}) {
      const WireCodec codec{format, 64, 0.01};
      const WireCodec* lossy = format == WireFormat::fp32 ? nullptr : &codec;
      std::vector<float> whole = contribution(t.replica, 4099, 11), buckets = whole;
      const std::vector<float> exact = site_order_fold(layout, 4099, 11);
      EncodedSumState whole_state;
      exchange_sum_hierarchical(lanes, whole.data(), whole.size(), nullptr, 0, lossy, &whole_state);
      std::deque<EncodedSumState> states(std::size(cuts) - 1);
      std::deque<HierarchicalInFlight> flights(std::size(cuts) - 1);
      for (std::size_t b = flights.size(); b-- > 0;) {  // backward order, as the backward produces them
        flights[b].start(lanes, 8 * static_cast<int>(b + 1), buckets.data() + cuts[b], cuts[b + 1] - cuts[b], nullptr,
                         0, lossy, &states[b]);
      }
      for (bool all_done = false; !all_done;) {
        all_done = true;
        for (HierarchicalInFlight& flight : flights) all_done = flight.progress() && all_done;
      }
      for (HierarchicalInFlight& flight : flights) flight.finish();  // a no-op once done
      std::vector<float> lowest(buckets.size()), highest(buckets.size());
      MPI_Allreduce(buckets.data(), lowest.data(), static_cast<int>(buckets.size()), MPI_FLOAT, MPI_MIN, lanes.whole.comm);
      MPI_Allreduce(buckets.data(), highest.data(), static_cast<int>(buckets.size()), MPI_FLOAT, MPI_MAX, lanes.whole.comm);
      for (std::size_t i = 0; i < buckets.size(); ++i) {
        ASSERT_EQ(lowest[i], highest[i]) << "members differ: " << describe(layout) << ", element " << i;
        if (format == WireFormat::fp32) {
          ASSERT_EQ(buckets[i], whole[i]) << describe(layout) << ", element " << i;
          ASSERT_EQ(whole[i], exact[i]) << describe(layout) << ", element " << i;
        } else {
          // int8 in blocks of 64 values: within a step of the block's largest magnitude (1e4 x 4 replicas / 127).
          ASSERT_NEAR(buckets[i], exact[i], 4e4f / 127.0f) << describe(layout) << ", element " << i;
        }
      }
    }
  }
}

}  // namespace
