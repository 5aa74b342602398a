// Device types in scenario files: [device_types.NAME] with tflops and
// memory_gib, one type per site ([sites] device_type) or per device
// ([network] device_type); without them every device is as before.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "geotrain/io/scenario.hpp"
#include "geotrain/plan/network.hpp"
#include "support/input_error.hpp"

namespace {

using geotrain::io::parse_scenario;
using geotrain::plan::kBytesPerGib;
using geotrain::testing::input_error_of;

const std::string kTypes = R"(
[device_types.A100-40]
tflops = 312.0
memory_gib = 40.0
[device_types.V100-16]
tflops = 125
memory_gib = 16
)";

const std::string kSites = R"(
[sites]
names = ["Virginia", "Oregon", "Ohio"]
devices = [2, 3, 1]
intra_latency_ms = 1
intra_bandwidth_gbps = 10
inter_latency_ms = 50
inter_bandwidth_gbps = 1
)";

const std::string kMatrix = R"(
[network]
latency_ms = [[0, 1, 5], [1, 0, 5], [5, 5, 0]]
bandwidth_gbps = [[0, 10, 1], [10, 0, 1], [1, 1, 0]]
)";

const std::string kWorkload = "\n[workload]\npp = 1\n";

geotrain::io::Scenario parse(const std::string& text) { return parse_scenario(text, "typed.toml"); }

TEST(DeviceTypes, SiteFormGivesEachDeviceItsSiteType) {
  const auto s = parse(kTypes + kSites + "device_type = [\"A100-40\", \"V100-16\", \"A100-40\"]\n" + kWorkload);
  const auto& net = s.network;
  ASSERT_TRUE(net.typed());
  ASSERT_EQ(net.device_count, 6);
  const std::vector<std::string> expected = {"A100-40", "A100-40", "V100-16", "V100-16", "V100-16", "A100-40"};
  for (int d = 0; d < 6; ++d) EXPECT_EQ(net.device_type(d)->name, expected[d]) << d;
  EXPECT_EQ(net.device_type(0)->tflops, 312.0);
  EXPECT_EQ(net.device_type(2)->memory_bytes, 16.0 * kBytesPerGib);
  EXPECT_EQ(net.device_tflops(99.0), (std::vector<double>{312, 312, 125, 125, 125, 312}));
}

TEST(DeviceTypes, FullMatrixFormGivesEachDeviceItsType) {
  const auto s = parse(kTypes + kMatrix + "device_type = [\"V100-16\", \"A100-40\", \"V100-16\"]\n" + kWorkload);
  EXPECT_EQ(s.network.device_tflops(0), (std::vector<double>{125, 312, 125}));
  EXPECT_EQ(s.network.device_memory_bytes(0), (std::vector<double>{16 * kBytesPerGib, 40 * kBytesPerGib,
                                                                   16 * kBytesPerGib}));
}

TEST(DeviceTypes, WithoutTypesDevicesAreIdentical) {
  const auto s = parse(kSites + kWorkload);
  EXPECT_FALSE(s.network.typed());
  EXPECT_EQ(s.network.device_type(0), nullptr);
  EXPECT_EQ(s.network.device_tflops(125.0), std::vector<double>(6, 125.0));
  EXPECT_EQ(s.network.device_memory_bytes(0.0), std::vector<double>(6, 0.0));
}

TEST(DeviceTypes, WrittenAndReadBackExactly) {
  const auto s = parse(kTypes + kMatrix + "device_type = [\"V100-16\", \"A100-40\", \"V100-16\"]\n" + kWorkload);
  const auto back = parse(geotrain::io::network_to_toml(s.network) + kWorkload);
  ASSERT_TRUE(back.network.typed());
  EXPECT_EQ(back.network.device_tflops(0), s.network.device_tflops(0));
  EXPECT_EQ(back.network.device_memory_bytes(0), s.network.device_memory_bytes(0));
  EXPECT_EQ(back.network.latency_s, s.network.latency_s);
}

TEST(DeviceTypes, SubnetworkKeepsTypes) {
  const auto s = parse(kTypes + kSites + "device_type = [\"A100-40\", \"V100-16\", \"A100-40\"]\n" + kWorkload);
  const auto sub = geotrain::plan::subnetwork(s.network, {5, 2});
  EXPECT_EQ(sub.device_tflops(0), (std::vector<double>{312, 125}));
}

struct Bad {
  const char* name;
  std::string text;
  std::string fragment;
};

TEST(DeviceTypes, BadInputIsOneLineNamingFileAndField) {
  const std::string site_list = "device_type = [\"A100-40\", \"V100-16\", \"A100-40\"]\n";
  const std::vector<Bad> cases = {
      {"unknown type", kTypes + kSites + "device_type = [\"A100-40\", \"V100-32\", \"A100-40\"]\n",
       "typed.toml: sites.device_type[1]: unknown device type \"V100-32\" (did you mean \"V100-16\"?)"},
      {"unknown, far from any", kTypes + kSites + "device_type = [\"A100-40\", \"H100\", \"A100-40\"]\n",
       "sites.device_type[1]: unknown device type \"H100\" (defined: A100-40, V100-16)"},
      {"list without types", kSites + site_list,
       "sites.device_type[0]: unknown device type \"A100-40\" (define it as [device_types.A100-40]"},
      {"short site list", kTypes + kSites + "device_type = [\"A100-40\", \"V100-16\"]\n",
       "typed.toml: sites.device_type: has 2 names but there are 3 sites (one type name per site)"},
      {"long device list", kTypes + kMatrix + "device_type = [\"A100-40\", \"A100-40\", \"A100-40\", \"A100-40\"]\n",
       "typed.toml: network.device_type: has 4 names but there are 3 devices"},
      {"types without list", kTypes + kSites, "typed.toml: sites.device_type: missing required field"},
      {"zero tflops", "[device_types.X]\ntflops = 0\nmemory_gib = 16\n" + kMatrix +
                          "device_type = [\"X\", \"X\", \"X\"]\n",
       "typed.toml: device_types.X.tflops: must be a finite number > 0, got 0"},
      {"negative memory", "[device_types.X]\ntflops = 10\nmemory_gib = -1\n" + kMatrix +
                              "device_type = [\"X\", \"X\", \"X\"]\n",
       "typed.toml: device_types.X.memory_gib: must be a finite number > 0, got -1"},
      {"nan tflops", "[device_types.X]\ntflops = nan\nmemory_gib = 1\n" + kMatrix + "device_type = [\"X\", \"X\", \"X\"]\n",
       "device_types.X.tflops: must be a finite number > 0, got nan"},
      {"missing memory", "[device_types.X]\ntflops = 10\n" + kMatrix + "device_type = [\"X\", \"X\", \"X\"]\n",
       "typed.toml: device_types.X.memory_gib: missing required field"},
      {"unknown key", "[device_types.X]\ntflops = 10\nmemory_gib = 1\nmemory_gb = 1\n" + kMatrix +
                          "device_type = [\"X\", \"X\", \"X\"]\n",
       "typed.toml: device_types.X.memory_gb: unknown key"},
      {"not a table", "device_types = 3\n" + kMatrix, "typed.toml: device_types: must be a table"},
      {"type not a table", "[device_types]\nX = 3\n" + kMatrix, "typed.toml: device_types.X: must be a table"},
      {"wrong element type", kTypes + kMatrix + "device_type = [\"A100-40\", 3, \"A100-40\"]\n",
       "typed.toml: network.device_type[1]: must be a string"},
  };
  for (const Bad& bad : cases) {
    SCOPED_TRACE(bad.name);
    const std::string message = input_error_of([&] { parse(bad.text + kWorkload); });
    EXPECT_NE(message.find(bad.fragment), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
