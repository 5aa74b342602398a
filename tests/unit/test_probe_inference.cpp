// What geotrain probe infers from its measurements (flow_sharing.hpp,
// network.hpp): the capacity of a shared resource from a drain time, and the
// sites from the latencies. Expected values are hand calculations.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "geotrain/plan/flow_sharing.hpp"
#include "geotrain/plan/network.hpp"

namespace geotrain::plan {
namespace {

// geotrain probe's uplink: sites A = {0, 2} and B = {1, 3}, 125 B/s inside a
// site and 25 B/s per pair between; A's ranks send 8 bytes each to B's at once.
TEST(ProbeInference, BindingCapacityIsTheUplinkThatTakesTheMeasuredTime) {
  Network net;
  net.device_count = 4;
  net.latency_s.assign(16, 0.01);  // no latency enters a drain time
  for (int u = 0; u < 4; ++u) {
    for (int v = 0; v < 4; ++v) net.bandwidth_bytes_per_s.push_back(u % 2 == v % 2 ? 125.0 : 25.0);
  }
  const std::vector<Transfer> across{{0, 1, 8.0}, {2, 3, 8.0}};
  // Alone on their pairs they end at 8 / 25 = 0.32 s. Both through an
  // uplink C: C / 2 each (below 25), done at 16 / C: 0.64 s is C = 25.
  EXPECT_NEAR(binding_capacity(net, across, 0.64), 25.0, 1e-6);
  EXPECT_NEAR(binding_capacity(net, across, 0.5), 32.0, 1e-6);
  // Within 5% of what the pairs allow alone: nothing binds.
  EXPECT_TRUE(std::isinf(binding_capacity(net, across, 0.33)));
  EXPECT_TRUE(std::isinf(binding_capacity(net, across, 0.1)));
  // A NIC of 10 B/s at rank 0 already takes 0.8 s: an end at 0.8 s is that
  // NIC; at 1.0 s the uplink C leaves 0 -> 1 min(10, C / 2) and 2 -> 3 its
  // share: C = 16 B/s gives 8 B/s each, 1.0 s.
  net.shared.nic_bytes_per_s.assign(4, 10.0);
  EXPECT_TRUE(std::isinf(binding_capacity(net, across, 0.8)));
  EXPECT_NEAR(binding_capacity(net, across, 1.0), 16.0, 1e-6);
  EXPECT_TRUE(std::isinf(binding_capacity(net, {}, 1.0)));
}

// Sites from measured latencies: a gap of 3x onto at least 1 ms.
TEST(ProbeInference, SitesByLatencyCutAtTheFirstWideGapOfAMillisecondOrMore) {
  auto network = [](const std::vector<std::vector<double>>& ms) {
    Network net;
    net.device_count = static_cast<int>(ms.size());
    for (const auto& row : ms) {
      for (double l : row) net.latency_s.push_back(l * 1e-3), net.bandwidth_bytes_per_s.push_back(1.0);
    }
    return net;
  };
  // Two cities of two ranks, rank order interleaved (mpirun by node): 0.02
  // ms inside, 10 ms between; measured asymmetric (the larger direction counts).
  EXPECT_EQ(sites_by_latency(network({{0, 10, 0.02, 11}, {10, 0, 9, 0.03}, {0.02, 9, 0, 10}, {11, 0.025, 10, 0}})),
            (std::vector<int>{0, 1, 0, 1}));
  // Three cities, 10 ms and 100 ms apart: each city a site (the lowest wide
  // gap), not the two near cities together.
  EXPECT_EQ(sites_by_latency(network({{0, 0.02, 10, 100}, {0.02, 0, 10, 100}, {10, 10, 0, 100}, {100, 100, 100, 0}})),
            (std::vector<int>{0, 0, 1, 2}));
  // Nodes of one cluster: shared memory 0.001 ms, the fabric 0.05 ms: a 50x
  // gap, but onto less than 1 ms: one site.
  EXPECT_EQ(sites_by_latency(network({{0, 0.001, 0.05}, {0.001, 0, 0.05}, {0.05, 0.05, 0}})),
            (std::vector<int>{0, 0, 0}));
  // The emulator's test sites: 5 ms inside, 25 ms between, +-10% noise.
  EXPECT_EQ(sites_by_latency(network({{0, 24, 5.4, 26}, {24, 0, 23, 4.6}, {5.4, 23, 0, 27}, {26, 4.6, 27, 0}})),
            (std::vector<int>{0, 1, 0, 1}));
  // Latencies rounded to 0 inside a site still join it; no gap at all: one site.
  EXPECT_EQ(sites_by_latency(network({{0, 0, 20}, {0, 0, 20}, {20, 20, 0}})), (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(sites_by_latency(network({{0, 20, 25}, {20, 0, 22}, {25, 22, 0}})), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(sites_by_latency(network({{0}})), (std::vector<int>{0}));
}

}  // namespace
}  // namespace geotrain::plan
