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

#include "geotrain/io/scenario.hpp"
#include "geotrain/mpi/mpi_check.hpp"
#include "geotrain/mpi/mpi_probe.hpp"

namespace {

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
