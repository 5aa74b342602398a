// The probe on the ranks of this job: a complete matrix (all links are
// loopback here, so only completeness and sanity can be checked, not the
// ordering of fast and slow links) that round-trips through the scenario file.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

#include "geotrain/io/scenario.hpp"
#include "geotrain/mpi/mpi_check.hpp"
#include "geotrain/mpi/mpi_probe.hpp"
#include "probe_uplinks.hpp"

namespace {

namespace probe = geotrain::runtime::probe;
using geotrain::runtime::ProbeOptions;
using geotrain::runtime::probe_network;

TEST(Probe, CompleteFinitePositiveMatrixThatLoadsAsAScenario) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ProbeOptions options;
  options.large_bytes = 256 << 10;
  options.bandwidth_repeats = 3;
  options.latency_repeats = 10;
  options.deadline_s = 30;
  const auto net = probe_network(MPI_COMM_WORLD, options);
  if (rank != 0) {
    EXPECT_EQ(net.device_count, 0);
    return;
  }
  ASSERT_EQ(net.device_count, size);
  ASSERT_EQ(net.latency_s.size(), static_cast<std::size_t>(size * size));
  ASSERT_EQ(net.site_of_device.size(), static_cast<std::size_t>(size));
  for (int u = 0; u < size; ++u) {
    EXPECT_FALSE(net.site(u).empty());
    for (int v = 0; v < size; ++v) {
      if (u == v) continue;
      EXPECT_TRUE(std::isfinite(net.latency(u, v))) << u << "->" << v;
      EXPECT_GE(net.latency(u, v), 0.0) << u << "->" << v;
      EXPECT_LT(net.latency(u, v), 10.0) << u << "->" << v;  // loose: oversubscribed cores
      EXPECT_TRUE(std::isfinite(net.bandwidth(u, v))) << u << "->" << v;
      EXPECT_GT(net.bandwidth(u, v), 0.0) << u << "->" << v;
      // The latency is measured once per pair and used in both directions.
      EXPECT_EQ(net.latency(u, v), net.latency(v, u));
    }
  }
  const std::string path = "probe-test-" + std::to_string(::getpid()) + ".toml";
  {
    std::ofstream file(path);
    file << geotrain::io::network_to_toml(net);
  }
  geotrain::io::WorkloadOverrides overrides;
  overrides.pipeline_stages = size;
  overrides.data_parallel = 1;
  const auto scenario = geotrain::io::load_scenario(path, overrides);
  std::remove(path.c_str());
  ASSERT_EQ(scenario.network.device_count, size);
  for (int u = 0; u < size; ++u) {
    EXPECT_EQ(scenario.network.site(u), net.site(u));
    for (int v = 0; v < size; ++v) {
      if (u == v) continue;
      EXPECT_NEAR(scenario.network.latency(u, v), net.latency(u, v), 1e-12 * net.latency(u, v));
      EXPECT_NEAR(scenario.network.bandwidth(u, v), net.bandwidth(u, v), 1e-12 * net.bandwidth(u, v));
    }
  }
}

}  // namespace

namespace {

// The uplink experiment's pairs and what rank 0 makes of its times, by hand
// (pure: every rank checks the same).
TEST(Probe, AnUplinkWhereASitesRanksTogetherTakeLongerThanOneAlone) {
  using Pairs = std::vector<std::pair<int, int>>;
  const std::vector<int> interleaved{0, 1, 0, 1};  // mpirun by node: A, B, A, B
  EXPECT_EQ(probe::uplink_pairs(interleaved, 0, true), (Pairs{{0, 1}, {2, 3}}));
  EXPECT_EQ(probe::uplink_pairs(interleaved, 0, false), (Pairs{{1, 0}, {3, 2}}));
  EXPECT_EQ(probe::uplink_pairs({0, 0, 0, 1}, 0, true), (Pairs{{0, 3}, {1, 3}, {2, 3}}));
  EXPECT_TRUE(probe::uplink_pairs({0, 0}, 0, true).empty());
  ProbeOptions options;
  options.large_bytes = 8 << 20;
  EXPECT_EQ(probe::uplink_chunk(options, interleaved), 8 << 20);
  EXPECT_EQ(probe::uplink_chunk(options, {0, 0, 0, 1}), (16 << 20) / 3);  // rank 3 receives three

  geotrain::plan::Network net;
  net.device_count = 4;
  net.latency_s.assign(16, 0.0);
  net.bandwidth_bytes_per_s.assign(16, 50.0);
  net.site_of_device = {"A", "B", "A", "B"};
  net.shared.nic_bytes_per_s = {100, 100, 100, 100};
  // A: two ranks of 8 bytes each. Outbound together 0.64 s against 0.32 s
  // alone: 16 bytes / 0.64 s = 25 B/s; inbound 0.40 s (> 1.2 x 0.32):
  // 40 B/s; the larger is kept. B: within 20% of alone both ways: it gets
  // its ranks' NICs, 100 + 100.
  const std::vector<probe::UplinkTimes> times{{0.64, 0.32}, {0.40, 0.32}, {0.33, 0.32}, {0.31, 0.32}};
  geotrain::plan::Network probed = net;
  probe::set_probed_uplinks(probed, interleaved, times, 8.0);
  EXPECT_NEAR(probed.shared.site_uplink_bytes_per_s.at("A"), 40.0, 1e-9);
  EXPECT_NEAR(probed.shared.site_uplink_bytes_per_s.at("B"), 200.0, 1e-9);
  // No site binds: no uplinks at all (the file then says nothing of them).
  probed = net;
  probe::set_probed_uplinks(probed, interleaved, {{0.33, 0.32}, {0.32, 0.32}, {0.30, 0.32}, {0.32, 0.32}}, 8.0);
  EXPECT_TRUE(probed.shared.site_uplink_bytes_per_s.empty());
  // One sender per direction cannot share anything: never an uplink.
  probed = net;
  probe::set_probed_uplinks(probed, {0, 1}, {{1.0, 0.1}, {1.0, 0.1}, {1.0, 0.1}, {1.0, 0.1}}, 8.0);
  EXPECT_TRUE(probed.shared.site_uplink_bytes_per_s.empty());
}

}  // namespace
