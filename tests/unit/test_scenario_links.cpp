// Scenario files' shared links (NICs, site uplinks, the default NICs) and
// network_to_toml, which writes a network back exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "geotrain/io/scenario.hpp"
#include "geotrain/plan/network.hpp"
#include "geotrain/plan/simulator.hpp"
#include "scenario_test_support.hpp"

namespace {

using namespace geotrain::io;  // the scenario reader under test
using namespace geotrain::testing::scenario;

// Only the DT-FM paper's own scenarios ask for the pair-only model; every
// other file's NICs are assumed at each device's fastest link, so no sum of
// the whole network is predicted faster than each member can push its share
// of the bytes, (n - 1) / n of them, through its NIC.
TEST(ScenarioShipped, OnlyThePapersOwnScenariosLetEveryTransferRunAtItsPairsRate) {
  using geotrain::plan::DataParallelScheme;
  for (const Shipped& s : kShipped) {
    SCOPED_TRACE(s.file);
    const geotrain::plan::Network net = load_shipped(s).network;
    const bool paper = std::string(s.origin) == "dtfm-original" || std::string(s.file) == "tiny-2x2.toml";
    EXPECT_EQ(net.shared.nics, paper ? geotrain::plan::NicSource::unlimited : geotrain::plan::NicSource::fastest_link);
    if (paper) continue;
    ASSERT_EQ(net.shared.nic_bytes_per_s.size(), static_cast<size_t>(net.device_count));
    std::vector<int> all(net.device_count);
    for (int d = 0; d < net.device_count; ++d) all[d] = d;
    const double bytes = 1e9, must = (net.device_count - 1.0) / net.device_count * bytes;
    for (auto scheme : {DataParallelScheme::direct, DataParallelScheme::ring}) {
      const double t = geotrain::plan::datap_exchange_s(net, all, bytes, scheme);
      for (int d : all) EXPECT_GE(t * (1 + 1e-12), must / net.shared.nic_bytes_per_s[d]) << to_string(scheme) << " " << d;
    }
  }
}

// ---------------------------------------------------------------------------
// network_to_toml

void expect_same_network(const geotrain::plan::Network& a, const geotrain::plan::Network& b) {
  ASSERT_EQ(a.device_count, b.device_count);
  EXPECT_EQ(a.site_of_device, b.site_of_device);
  // A network without NICs reads back as "unlimited": the same pair-only model.
  EXPECT_EQ(a.shared.nics == geotrain::plan::NicSource::fastest_link, b.shared.nics == geotrain::plan::NicSource::fastest_link);
  EXPECT_EQ(a.shared.nic_bytes_per_s, b.shared.nic_bytes_per_s);
  EXPECT_EQ(a.shared.site_uplink_bytes_per_s, b.shared.site_uplink_bytes_per_s);
  for (size_t k = 0; k < a.latency_s.size(); ++k) {
    // Bitwise identical, not just close.
    ASSERT_EQ(a.latency_s[k], b.latency_s[k]) << "latency entry " << k;
    ASSERT_EQ(a.bandwidth_bytes_per_s[k], b.bandwidth_bytes_per_s[k]) << "bandwidth entry " << k;
  }
}

Scenario reload(const geotrain::plan::Network& network) {
  return parse_scenario(network_to_toml(network), "written.toml", {1, std::nullopt});
}

TEST(ScenarioWrite, ShippedScenariosRoundTripExactly) {
  for (const Shipped& s : kShipped) {
    SCOPED_TRACE(s.file);
    const Scenario original = load_shipped(s);
    expect_same_network(original.network, reload(original.network).network);
  }
}

// Networks whose values came from files in ms and Gbps with arbitrary
// (non-decimal) doubles: the writer must find the exact file numbers.
TEST(ScenarioWrite, ArbitraryFileValuesRoundTripExactly) {
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> latency_ms(0.0, 400.0);
  std::uniform_real_distribution<double> log_gbps(-3.0, 3.0);
  const int n = 40;
  geotrain::plan::Network network;
  network.device_count = n;
  network.latency_s.assign(n * n, 0.0);
  network.bandwidth_bytes_per_s.assign(n * n, std::numeric_limits<double>::infinity());
  for (int u = 0; u < n; ++u) {
    for (int v = 0; v < n; ++v) {
      if (u == v) continue;
      network.latency_s[u * n + v] = latency_ms(rng) / 1000.0;
      network.bandwidth_bytes_per_s[u * n + v] = std::pow(10.0, log_gbps(rng)) * kBytesPerGbit;
    }
  }
  for (int u = 0; u < n; ++u) network.site_of_device.push_back(u % 3 ? "plain" : "odd \"name\" \\ x");
  expect_same_network(network, reload(network).network);
}

// Values that no file number maps to exactly still come back within an ulp.
TEST(ScenarioWrite, AnyValueRoundTripsWithinOneUlp) {
  std::mt19937_64 rng(777);
  std::uniform_real_distribution<double> seconds(1e-6, 0.5);
  std::uniform_real_distribution<double> bytes(1e6, 1e11);
  const int n = 30;
  geotrain::plan::Network network;
  network.device_count = n;
  network.latency_s.assign(n * n, 0.0);
  network.bandwidth_bytes_per_s.assign(n * n, std::numeric_limits<double>::infinity());
  for (int k = 0; k < n * n; ++k) {
    if (k / n == k % n) continue;
    network.latency_s[k] = seconds(rng);
    network.bandwidth_bytes_per_s[k] = bytes(rng);
  }
  const auto back = reload(network).network;
  for (int k = 0; k < n * n; ++k) {
    if (k / n == k % n) continue;
    const double lat = network.latency_s[k];
    const double bw = network.bandwidth_bytes_per_s[k];
    EXPECT_LE(std::fabs(back.latency_s[k] - lat), std::nextafter(lat, 1.0) - lat) << k;
    EXPECT_LE(std::fabs(back.bandwidth_bytes_per_s[k] - bw), std::nextafter(bw, 1e300) - bw) << k;
  }
}

TEST(ScenarioWrite, WritesFullMatrixFormWithZeroDiagonal) {
  const std::string text = network_to_toml(load("tiny-2x2.toml").network);
  EXPECT_NE(text.find("[network]"), std::string::npos);
  EXPECT_NE(text.find("latency_ms = ["), std::string::npos);
  EXPECT_NE(text.find("[0.0, 1.0, 50.0, 50.0]"), std::string::npos) << text;
  EXPECT_NE(text.find("[0.0, 10.0, 1.0, 1.0]"), std::string::npos) << text;
  EXPECT_NE(text.find("sites = [\"X\", \"X\", \"Y\", \"Y\"]"), std::string::npos) << text;
  EXPECT_EQ(text.find("inf"), std::string::npos);
}

TEST(ScenarioSharedLinks, NicsAndUplinksFromBothForms) {
  // Site form: one number for every site, or one per site; NICs go to each site's devices.
  const std::string head = two_sites(R"(["a", "b"])", "[2, 2]", 20);
  const Scenario sites = parse_scenario(head + "nic_gbps = [25, 40]\nuplink_gbps = 8\n" + kGoodWorkload, "s.toml");
  EXPECT_EQ(sites.network.shared.nic_bytes_per_s, (std::vector<double>{gbps(25), gbps(25), gbps(40), gbps(40)}));
  EXPECT_EQ(sites.network.shared.site_uplink_bytes_per_s, (std::map<std::string, double>{{"a", gbps(8)}, {"b", gbps(8)}}));
  EXPECT_EQ(sites.network.shared.nics, geotrain::plan::NicSource::given);
  // None given: each device's NIC is its fastest link (10 Gbit/s inside a site, 1 between), said as assumed.
  const Scenario none = parse_scenario(head + kGoodWorkload, "s.toml");
  EXPECT_EQ(none.network.shared.nic_bytes_per_s, std::vector<double>(4, gbps(10)));
  EXPECT_EQ(none.network.shared.nics, geotrain::plan::NicSource::fastest_link);
  EXPECT_NE(geotrain::plan::describe_shared_links(none.network).find("assumed"), std::string::npos);
  // "unlimited": the pair-only model, asked for.
  const Scenario unlimited = parse_scenario(head + "nic_gbps = \"unlimited\"\n" + kGoodWorkload, "s.toml");
  EXPECT_FALSE(unlimited.network.shared.any());
  EXPECT_EQ(unlimited.network.shared.nics, geotrain::plan::NicSource::unlimited);
  expect_error([&] { parse_scenario(head + "nic_gbps = \"none\"\n" + kGoodWorkload, "s.toml"); },
               {"s.toml", "sites.nic_gbps", "\"unlimited\""});
  // Full-matrix form: NICs per device, uplinks per site in order of first appearance.
  const std::string matrix = matrix4("[1, 0, 50, 50]", "[10, 0, 1, 1]") + "sites = [\"y\", \"y\", \"x\", \"x\"]\n";
  const Scenario full = parse_scenario(matrix + "nic_gbps = 10\nuplink_gbps = [2, 3]\n" + kGoodWorkload, "m.toml");
  EXPECT_EQ(full.network.shared.nic_bytes_per_s, std::vector<double>(4, gbps(10)));
  EXPECT_EQ(full.network.shared.site_uplink_bytes_per_s, (std::map<std::string, double>{{"y", gbps(2)}, {"x", gbps(3)}}));
  // Written back (network_to_toml), given NICs and uplinks read the same.
  expect_same_network(full.network, reload(full.network).network);
  expect_same_network(unlimited.network, reload(unlimited.network).network);
  // Bad input names the field.
  expect_error([&] { parse_scenario(head + "nic_gbps = [25]\n" + kGoodWorkload, "s.toml"); },
               {"s.toml", "sites.nic_gbps", "1 numbers for 2 sites"});
  expect_error([&] { parse_scenario(head + "uplink_gbps = [1, -2]\n" + kGoodWorkload, "s.toml"); },
               {"sites.uplink_gbps[1]"});
  expect_error([&] { parse_scenario(matrix4("[1, 0, 50, 50]", "[10, 0, 1, 1]") + "uplink_gbps = 1\n" + kGoodWorkload, "m.toml"); },
               {"network.uplink_gbps", "needs network.sites"});
}

}  // namespace
