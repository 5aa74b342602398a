// Scenario files: the shipped scenarios carry the reference's numbers, and
// the loader rejects bad input with a message naming file and field (shared
// links and network_to_toml: test_scenario_links.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "geotrain/common/errors.hpp"
#include "support/scratch_dir.hpp"
#include "geotrain/io/scenario.hpp"
#include "geotrain/plan/network.hpp"
#include "geotrain/plan/workload.hpp"
#include "scenario_test_support.hpp"

namespace {

using geotrain::InputError;
using namespace geotrain::io;  // the scenario reader under test
using namespace geotrain::testing::scenario;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// The shipped scenarios.

TEST(ScenarioShipped, EveryFileLoadsWithItsSizeAndDegrees) {
  for (const Shipped& s : kShipped) {
    SCOPED_TRACE(s.file);
    const Scenario scenario = load_shipped(s);
    const int n = scenario.network.device_count;
    EXPECT_EQ(n, s.devices);
    EXPECT_EQ(scenario.network.latency_s.size(), static_cast<size_t>(n) * n);
    EXPECT_EQ(scenario.network.bandwidth_bytes_per_s.size(), static_cast<size_t>(n) * n);
    EXPECT_EQ(scenario.network.site_of_device.size(), s.has_sites ? static_cast<size_t>(n) : 0u);
    EXPECT_EQ(scenario.workload.pipeline_stages, s.pp);
    EXPECT_EQ(scenario.workload.data_parallel, s.dp);
    EXPECT_EQ(scenario.workload.origin, s.origin);
    EXPECT_EQ(scenario.workload_from_file, s.workload_from_file);
    EXPECT_FALSE(scenario.name.empty());
    EXPECT_FALSE(scenario.description.empty());
    EXPECT_FALSE(scenario.source.empty());
    for (int u = 0; u < n; ++u) {
      EXPECT_EQ(scenario.network.latency(u, u), 0.0);
      EXPECT_TRUE(std::isinf(scenario.network.bandwidth(u, u)));
      for (int v = 0; v < n; ++v) {
        if (u == v) continue;
        EXPECT_TRUE(std::isfinite(scenario.network.latency(u, v)) && scenario.network.latency(u, v) >= 0);
        EXPECT_TRUE(std::isfinite(scenario.network.bandwidth(u, v)) && scenario.network.bandwidth(u, v) > 0);
      }
    }
  }
}

// A scenario added to the folder without being listed above would escape
// every check here.
TEST(ScenarioShipped, TableListsEveryFileInTheFolder) {
  std::set<std::string> listed;
  for (const Shipped& s : kShipped) listed.insert(s.file);
  std::set<std::string> present;
  for (const auto& entry : fs::directory_iterator(scenario_path(""))) {
    if (entry.path().extension() == ".toml") present.insert(entry.path().filename().string());
  }
  EXPECT_EQ(present, listed);
}

TEST(ScenarioShipped, OnDemandNumbers) {
  const auto net = load("on-demand.toml").network;
  EXPECT_EQ(net.bandwidth(0, 7), gbps(100));
  EXPECT_EQ(net.bandwidth(7, 8), gbps(3.125));
  EXPECT_EQ(net.bandwidth(63, 0), gbps(3.125));
  EXPECT_EQ(net.latency(7, 8), 0.0);
  EXPECT_EQ(net.site(8), net.site(15));
  EXPECT_NE(net.site(7), net.site(8));
}

TEST(ScenarioShipped, SpotNumbers) {
  const auto net = load("spot.toml").network;
  EXPECT_EQ(net.bandwidth(0, 3), gbps(100));    // same 4-GPU machine
  EXPECT_EQ(net.bandwidth(28, 31), gbps(100));  // the last 4-GPU machine
  EXPECT_EQ(net.bandwidth(0, 4), gbps(1.25));   // next 4-GPU machine
  EXPECT_EQ(net.bandwidth(31, 32), gbps(1.25));
  EXPECT_EQ(net.bandwidth(32, 33), gbps(1.25));  // two single-GPU machines
  EXPECT_EQ(net.bandwidth(63, 0), gbps(1.25));
  for (int v = 1; v < 64; ++v) EXPECT_EQ(net.latency(0, v), 0.0);
  std::set<std::string> sites(net.site_of_device.begin(), net.site_of_device.end());
  EXPECT_EQ(sites.size(), 40u);
}

TEST(ScenarioShipped, MultiDcNumbers) {
  const auto net = load("multi-dc.toml").network;
  EXPECT_EQ(net.site(0), "Ohio");
  EXPECT_EQ(net.site(31), "Ohio");
  EXPECT_EQ(net.site(32), "Virginia");
  EXPECT_EQ(net.latency(0, 31), 0.001);
  EXPECT_EQ(net.bandwidth(0, 31), gbps(5));
  EXPECT_EQ(net.latency(31, 32), 0.011);
  EXPECT_EQ(net.bandwidth(63, 0), gbps(1.12));
}

TEST(ScenarioShipped, RegionalNumbers) {
  const auto net = load("regional.toml").network;
  EXPECT_EQ(net.site(0), "Virginia");
  EXPECT_EQ(net.site(16), "Oregon");
  EXPECT_EQ(net.site(32), "California");
  EXPECT_EQ(net.site(48), "Ohio");
  EXPECT_EQ(net.latency(0, 48), 0.011);  // Virginia - Ohio, both directions
  EXPECT_EQ(net.latency(48, 0), 0.011);
  EXPECT_EQ(net.bandwidth(0, 48), gbps(1.12));
  EXPECT_EQ(net.latency(0, 16), 0.067);  // Virginia - Oregon
  EXPECT_EQ(net.bandwidth(16, 0), gbps(1.15));
  EXPECT_EQ(net.latency(16, 32), 0.012);  // Oregon - California
  EXPECT_EQ(net.bandwidth(32, 16), gbps(1.25));
  EXPECT_EQ(net.latency(32, 63), 0.052);  // California - Ohio
  EXPECT_EQ(net.bandwidth(63, 32), gbps(1.02));
  EXPECT_EQ(net.latency(0, 15), 0.005);  // inside Virginia
  EXPECT_EQ(net.bandwidth(0, 15), gbps(2));
  const auto emulated = load("regional-10ms.toml").network;
  EXPECT_EQ(emulated.latency(0, 15), 0.010);
  EXPECT_EQ(emulated.latency(0, 48), 0.011);
}

TEST(ScenarioShipped, WorldWideNumbers) {
  const auto net = load("world-wide.toml").network;
  EXPECT_EQ(net.site(24), "Tokyo");
  EXPECT_EQ(net.site(32), "Seoul");
  EXPECT_EQ(net.latency(24, 32), 0.034);  // Tokyo - Seoul
  EXPECT_EQ(net.bandwidth(24, 32), 1.10 * 1.25e8);
  EXPECT_EQ(net.latency(0, 8), 0.067);  // Oregon - Virginia
  EXPECT_EQ(net.bandwidth(0, 8), gbps(0.79));
  EXPECT_EQ(net.latency(32, 63), 0.228);  // Seoul - Ireland
  EXPECT_EQ(net.bandwidth(63, 32), gbps(0.335));
  EXPECT_EQ(net.latency(40, 48), 0.014);  // London - Frankfurt
  EXPECT_EQ(net.bandwidth(48, 16), gbps(0.799));  // Frankfurt - Ohio
  EXPECT_EQ(net.latency(0, 7), 0.005);  // inside Oregon
  EXPECT_EQ(net.bandwidth(0, 7), gbps(2));
  const auto emulated = load("world-wide-10ms.toml").network;
  EXPECT_EQ(emulated.latency(0, 7), 0.010);
  EXPECT_EQ(emulated.latency(24, 32), 0.034);
  EXPECT_EQ(emulated.bandwidth(24, 32), gbps(1.10));
}

TEST(ScenarioShipped, TinyIsReferenceExampleA) {
  const Scenario scenario = load("tiny-2x2.toml");
  const auto& net = scenario.network;
  EXPECT_EQ(net.site_of_device, (std::vector<std::string>{"X", "X", "Y", "Y"}));
  EXPECT_EQ(net.latency(0, 1), 0.001);
  EXPECT_EQ(net.bandwidth(2, 3), gbps(10));
  EXPECT_EQ(net.latency(1, 2), 0.050);
  EXPECT_EQ(net.bandwidth(3, 0), gbps(1));
  // Example A's pair cost for a cross pair: 0.050 + 1 Gbit / 1 Gbit/s.
  EXPECT_NEAR(net.transfer_s(0, 2, 1.25e8), 1.05, 1e-12);
}

TEST(ScenarioShipped, AsymmetricKeepsDirections) {
  const auto net = load("asymmetric-4.toml", {2, std::nullopt}).network;
  EXPECT_EQ(net.latency(0, 1), 0.0025);
  EXPECT_EQ(net.latency(1, 0), 0.0035);
  EXPECT_EQ(net.bandwidth(2, 3), gbps(12));
  EXPECT_EQ(net.bandwidth(3, 2), gbps(10));
  EXPECT_TRUE(net.site_of_device.empty());
}

TEST(ScenarioShipped, FourSitesRoundRobinAndLinks) {
  const auto net = load("four-sites-16.toml").network;
  const std::vector<std::string> cycle = {"Frankfurt", "Paris", "Madrid", "Warsaw"};
  for (int d = 0; d < 16; ++d) EXPECT_EQ(net.site(d), cycle[d % 4]) << "device " << d;
  EXPECT_DOUBLE_EQ(net.latency(0, 4), 0.0002);  // inside Frankfurt
  EXPECT_EQ(net.latency(0, 1), 0.009);  // Frankfurt - Paris link
  EXPECT_EQ(net.bandwidth(1, 0), gbps(2.5));
  EXPECT_EQ(net.latency(2, 3), 0.030);  // Madrid - Warsaw: latency from inter_*
  EXPECT_EQ(net.bandwidth(3, 2), gbps(0.5));  // ... bandwidth from the link
  EXPECT_EQ(net.bandwidth(0, 2), gbps(0.8));  // Frankfurt - Madrid: inter_*
}

// ---------------------------------------------------------------------------
// Workloads.

TEST(ScenarioWorkload, DtfmOriginalPresetConstants) {
  const Scenario scenario = load("world-wide.toml");
  EXPECT_EQ(scenario.workload.origin, "dtfm-original");
  EXPECT_NEAR(scenario.workload.c_pp_bytes, 471249222.76, 471249222.76 * 1e-10);
  EXPECT_EQ(scenario.workload.c_dp_bytes, 6.5e8);
}

TEST(ScenarioWorkload, ModelPresetUsesDefaultShape) {
  const Scenario scenario = load("two-sites-8.toml");
  const auto expected = geotrain::plan::workload_from_model(geotrain::plan::TrainingShape{}, 2, 4);
  EXPECT_EQ(scenario.workload.c_pp_bytes, expected.c_pp_bytes);
  EXPECT_EQ(scenario.workload.c_dp_bytes, expected.c_dp_bytes);
  EXPECT_EQ(scenario.workload.model.name, "gpt3-xl");
}

const char* kTwoDevices = R"(
[network]
latency_ms = [[0, 1], [1, 0]]
bandwidth_gbps = [[0, 10], [10, 0]]
)";

TEST(ScenarioWorkload, ModelOverrides) {
  const std::string text = std::string(kTwoDevices) + R"(
[workload]
pp = 2
dp = 1
layers = 32
hidden = 4096
heads = 32
sequence_length = 4096
vocabulary = 32000
tokens_per_step = 4194304
activation_bytes = 4
gradient_bytes = 2
model_name = "custom"
)";
  const Scenario scenario = parse_scenario(text, "overrides.toml");
  geotrain::plan::TrainingShape shape;
  shape.name = "custom";
  shape.layers = 32;
  shape.hidden = 4096;
  shape.heads = 32;
  shape.sequence_length = 4096;
  shape.vocabulary = 32000;
  shape.tokens_per_step = 4194304;
  shape.activation_bytes = 4;
  shape.gradient_bytes = 2;
  const auto expected = geotrain::plan::workload_from_model(shape, 2, 1);
  EXPECT_EQ(scenario.workload.model.name, "custom");
  EXPECT_EQ(scenario.workload.model.layers, 32);
  EXPECT_EQ(scenario.workload.c_pp_bytes, expected.c_pp_bytes);
  EXPECT_EQ(scenario.workload.c_dp_bytes, expected.c_dp_bytes);
}

TEST(ScenarioWorkload, CommandLineOverridesAndDerivation) {
  // No [workload]: one degree given, the other derived from N.
  Scenario s = load("asymmetric-4.toml", {std::nullopt, 4});
  EXPECT_EQ(s.workload.pipeline_stages, 1);
  EXPECT_EQ(s.workload.data_parallel, 4);
  EXPECT_FALSE(s.workload_from_file);
  EXPECT_EQ(s.workload.origin, "model");
  // Both given on the command line replace the file's values.
  s = load("world-wide.toml", {4, 16});
  EXPECT_EQ(s.workload.pipeline_stages, 4);
  EXPECT_EQ(s.workload.data_parallel, 16);
  EXPECT_TRUE(s.workload_from_file);
  EXPECT_EQ(s.workload.origin, "dtfm-original");
}

TEST(ScenarioWorkload, CommandLineErrors) {
  const std::string path = scenario_path("asymmetric-4.toml");
  expect_error([&] { load_scenario(path); },
               {path + ": workload.pp: no [workload] table and no --pp/--dp given"});
  expect_error([&] { load_scenario(path, {3, std::nullopt}); }, {path, "workload.dp", "not divisible"});
  expect_error([&] { load_scenario(path, {0, std::nullopt}); }, {path, "workload.pp", "--pp must be >= 1"});
  expect_error([&] { load("world-wide.toml", {4, std::nullopt}); },
               {"world-wide.toml: workload.pp: pp*dp = 32 but the network has 64 devices"});
}

// ---------------------------------------------------------------------------
// Site form details.

TEST(ScenarioSites, RoundRobinSkipsFullSites) {
  const Scenario scenario = parse_scenario(R"(
[sites]
names = ["A", "B", "C"]
devices = [3, 1, 2]
device_order = "round-robin"
intra_latency_ms = 1
intra_bandwidth_gbps = 10
inter_latency_ms = 20
inter_bandwidth_gbps = 1
)", "rr.toml", {1, std::nullopt});
  const std::vector<std::string> expected = {"A", "B", "C", "A", "C", "A"};
  EXPECT_EQ(scenario.network.site_of_device, expected);
  EXPECT_EQ(scenario.network.latency(0, 3), 0.001);  // both in A
  EXPECT_EQ(scenario.network.latency(0, 1), 0.020);
}

TEST(ScenarioSites, BlockedIsTheDefault) {
  const Scenario scenario = parse_scenario(two_sites(R"(["A", "B"])", "[1, 2]", 20), "blocked.toml", {1, std::nullopt});
  EXPECT_EQ(scenario.network.site_of_device, (std::vector<std::string>{"A", "B", "B"}));
}

// Intra values are only needed for sites with two or more devices, and a
// link between a site and itself sets its internal link.
TEST(ScenarioSites, LinksAloneCanDescribeEveryPair) {
  const Scenario scenario = parse_scenario(R"(
[sites]
names = ["A", "B"]
devices = [1, 2]
[[sites.link]]
between = ["A", "B"]
latency_ms = 30
bandwidth_gbps = 0.5
[[sites.link]]
between = ["B", "B"]
latency_ms = 2
bandwidth_gbps = 40
)", "links.toml", {3, std::nullopt});
  EXPECT_EQ(scenario.network.latency(0, 2), 0.030);
  EXPECT_EQ(scenario.network.bandwidth(2, 0), gbps(0.5));
  EXPECT_EQ(scenario.network.latency(1, 2), 0.002);
  EXPECT_EQ(scenario.network.bandwidth(2, 1), gbps(40));
}

TEST(ScenarioMatrix, DiagonalIsIgnoredAndNormalised) {
  const Scenario scenario = parse_scenario(R"(
[network]
latency_ms = [[-7, 1], [2, 1e300]]
bandwidth_gbps = [[0, 10], [20, -3]]
[workload]
pp = 1
dp = 2
)", "diagonal.toml");
  EXPECT_EQ(scenario.network.latency(0, 0), 0.0);
  EXPECT_EQ(scenario.network.latency(1, 1), 0.0);
  EXPECT_TRUE(std::isinf(scenario.network.bandwidth(0, 0)));
  EXPECT_EQ(scenario.network.transfer_s(1, 1, 1e9), 0.0);
  EXPECT_EQ(scenario.network.latency(1, 0), 0.002);
  EXPECT_EQ(scenario.name, "diagonal");  // no [scenario]: the file's stem
}

// ---------------------------------------------------------------------------
// Bad inputs: one temp file each; the message must name the file and field.

class ScenarioErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = geotrain::testing::scratch_dir("scenario");
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  fs::path dir_;
};

struct BadInput {
  std::string name;
  std::string toml;
  std::vector<std::string> fragments;  // besides the file name
};

const std::string kSites = two_sites(R"(["Virginia", "Oregon"])", "[2, 2]", 50);

std::vector<BadInput> bad_inputs() {
  const std::string good_row_l = "[1, 0, 50, 50]";
  const std::string good_row_b = "[10, 0, 1, 1]";
  auto with_workload = [](const std::string& text) { return text + kGoodWorkload; };
  return {
      {"syntax", "[network\nlatency_ms = 1\n", {"line 1", "TOML syntax error"}},
      {"unknown-key", (with_workload(matrix4(good_row_l, good_row_b) + "latncy_ms = 3\n")),
       {": network.latncy_ms: unknown key"}},
      {"unknown-table", (with_workload(matrix4(good_row_l, good_row_b)) + "[netwrok]\n"),
       {": netwrok: unknown key"}},
      {"unknown-workload-key", (matrix4(good_row_l, good_row_b) + "[workload]\npp = 2\ndp = 2\nlayer = 3\n"),
       {"workload.layer: unknown key"}},
      {"unknown-link-key", (kSites + "[[sites.link]]\nbetween = [\"Virginia\", \"Oregon\"]\nlatency = 3\n" +
                                kGoodWorkload),
       {"sites.link[0].latency: unknown key"}},
      {"wrong-type-matrix", (with_workload("[network]\nlatency_ms = \"fast\"\nbandwidth_gbps = [[1]]\n")),
       {"network.latency_ms: must be an array, got a string"}},
      {"wrong-type-entry", (with_workload(matrix4("[1, 0, \"x\", 50]", good_row_b))),
       {"network.latency_ms[1][2]: must be a number, got a string"}},
      {"wrong-type-pp", (matrix4(good_row_l, good_row_b) + "[workload]\npp = \"2\"\ndp = 2\n"),
       {"workload.pp: must be an integer, got a string"}},
      {"wrong-type-table", "network = 3\n", {"network: must be a table"}},
      {"ragged-row", (with_workload(matrix4("[1, 0, 50]", good_row_b))),
       {"network.latency_ms[1]: row has 3 numbers, expected 4"}},
      {"non-square", (with_workload("[network]\nlatency_ms = [[0, 1, 2], [1, 0, 2]]\nbandwidth_gbps = [[1]]\n")),
       {"network.latency_ms: must be square, got 2 rows of 3 numbers"}},
      {"sizes-differ", (with_workload("[network]\nlatency_ms = [[0, 1], [1, 0]]\nbandwidth_gbps = [[1]]\n")),
       {"network.bandwidth_gbps: is 1 x 1 but network.latency_ms is 2 x 2"}},
      {"nan-bandwidth", (with_workload(matrix4(good_row_l, "[10, 0, nan, 1]"))),
       {"network.bandwidth_gbps[1][2]: must be a finite number > 0, got nan"}},
      {"inf-latency", (with_workload(matrix4("[1, 0, inf, 50]", good_row_b))),
       {"network.latency_ms[1][2]: must be a finite number >= 0, got inf"}},
      {"zero-bandwidth", (with_workload(matrix4(good_row_l, "[0, 0, 1, 1]"))),
       {"network.bandwidth_gbps[1][0]: must be a finite number > 0, got 0"}},
      {"negative-bandwidth", (with_workload(matrix4(good_row_l, "[10, 0, 1, -1]"))),
       {"network.bandwidth_gbps[1][3]: must be a finite number > 0, got -1"}},
      {"negative-latency", (with_workload(matrix4("[-0.5, 0, 50, 50]", good_row_b))),
       {"network.latency_ms[1][0]: must be a finite number >= 0, got -0.5"}},
      {"bad-network-sites", (with_workload(matrix4(good_row_l, good_row_b) + "sites = [\"a\", \"b\"]\n")),
       {"network.sites: has 2 names but the network has 4 devices"}},
      {"devices-not-pp-times-dp", (matrix4(good_row_l, good_row_b) + "[workload]\npp = 3\ndp = 2\n"),
       {"workload.pp: pp*dp = 6 but the network has 4 devices"}},
      {"pp-zero", (matrix4(good_row_l, good_row_b) + "[workload]\npp = 0\ndp = 4\n"),
       {"workload.pp: must be an integer >= 1, got 0"}},
      {"workload-without-degrees", (matrix4(good_row_l, good_row_b) + "[workload]\npreset = \"model\"\n"),
       {"workload.pp: missing required field"}},
      {"bad-preset", (matrix4(good_row_l, good_row_b) + "[workload]\npp = 2\ndp = 2\npreset = \"gpt\"\n"),
       {"workload.preset: must be \"model\" or \"dtfm-original\""}},
      {"preset-with-model-fields",
       (matrix4(good_row_l, good_row_b) + "[workload]\npp = 2\ndp = 2\npreset = \"dtfm-original\"\nlayers = 4\n"),
       {"workload.preset: model fields"}},
      {"heads-do-not-divide", (matrix4(good_row_l, good_row_b) + "[workload]\npp = 2\ndp = 2\nheads = 3\n"),
       {"workload.heads: hidden 2048 is not divisible by 3 heads"}},
      {"both-forms", (with_workload(matrix4(good_row_l, good_row_b) + kSites)),
       {"sites: cannot be combined with [network]"}},
      {"neither-form", kGoodWorkload, {"network: missing required field"}},
      {"link-site-missing",
       (kSites + "[[sites.link]]\nbetween = [\"Virginia\", \"Ohio\"]\nlatency_ms = 3\n" + kGoodWorkload),
       {"sites.link[0].between[1]: site \"Ohio\" is not in sites.names"}},
      {"link-duplicate",
       (kSites +
            "[[sites.link]]\nbetween = [\"Virginia\", \"Oregon\"]\nlatency_ms = 3\n"
            "[[sites.link]]\nbetween = [\"Oregon\", \"Virginia\"]\nlatency_ms = 4\n" + kGoodWorkload),
       {"sites.link[1].between: the pair Oregon - Virginia is already given"}},
      {"link-empty",
       (kSites + "[[sites.link]]\nbetween = [\"Virginia\", \"Oregon\"]\n" + kGoodWorkload),
       {"sites.link[0]: needs latency_ms or bandwidth_gbps"}},
      {"link-negative-bandwidth",
       (kSites + "[[sites.link]]\nbetween = [\"Virginia\", \"Oregon\"]\nbandwidth_gbps = -2\n" +
            kGoodWorkload),
       {"sites.link[0].bandwidth_gbps: must be a finite number > 0, got -2"}},
      {"duplicate-site-name",
       "[sites]\nnames = [\"A\", \"A\"]\ndevices = [2, 2]\nintra_latency_ms = 1\nintra_bandwidth_gbps = 1\n"
       "inter_latency_ms = 1\ninter_bandwidth_gbps = 1\n[workload]\npp = 2\ndp = 2\n",
       {"sites.names[1]: duplicate site name \"A\""}},
      {"devices-count-mismatch",
       "[sites]\nnames = [\"A\", \"B\"]\ndevices = [4]\nintra_latency_ms = 1\nintra_bandwidth_gbps = 1\n"
       "inter_latency_ms = 1\ninter_bandwidth_gbps = 1\n[workload]\npp = 2\ndp = 2\n",
       {"sites.devices: has 1 entries but sites.names has 2"}},
      {"devices-zero",
       "[sites]\nnames = [\"A\", \"B\"]\ndevices = [4, 0]\nintra_latency_ms = 1\nintra_bandwidth_gbps = 1\n"
       "inter_latency_ms = 1\ninter_bandwidth_gbps = 1\n[workload]\npp = 2\ndp = 2\n",
       {"sites.devices[1]: must be an integer >= 1, got 0"}},
      {"site-matrix-not-s-by-s",
       "[sites]\nnames = [\"A\", \"B\"]\ndevices = [2, 2]\nlatency_ms = [[1]]\nbandwidth_gbps = [[1, 1], [1, 1]]\n"
       "[workload]\npp = 2\ndp = 2\n",
       {"sites.latency_ms: is 1 x 1 but there are 2 sites"}},
      {"site-matrix-zero-intra",
       "[sites]\nnames = [\"A\", \"B\"]\ndevices = [2, 2]\nlatency_ms = [[1, 5], [5, 1]]\n"
       "bandwidth_gbps = [[1, 1], [1, 0]]\n[workload]\npp = 2\ndp = 2\n",
       {"sites.bandwidth_gbps[1][1]: must be a finite number > 0, got 0"}},
      {"matrices-and-scalars",
       "[sites]\nnames = [\"A\", \"B\"]\ndevices = [2, 2]\nlatency_ms = [[1, 5], [5, 1]]\n"
       "bandwidth_gbps = [[1, 1], [1, 1]]\ninter_latency_ms = 3\n[workload]\npp = 2\ndp = 2\n",
       {"sites.inter_latency_ms: cannot be combined with sites.latency_ms"}},
      {"missing-inter-scalar",
       "[sites]\nnames = [\"A\", \"B\"]\ndevices = [2, 2]\nintra_latency_ms = 1\nintra_bandwidth_gbps = 1\n"
       "inter_latency_ms = 1\n[workload]\npp = 2\ndp = 2\n",
       {"sites.inter_bandwidth_gbps: missing required field"}},
      {"no-link-values", "[sites]\nnames = [\"A\", \"B\"]\ndevices = [2, 2]\n[workload]\npp = 2\ndp = 2\n",
       {"sites.latency_ms: missing required field"}},
      {"bad-device-order", (kSites + "device_order = \"by-slot\"\n" + kGoodWorkload),
       {"sites.device_order: must be \"blocked\" or \"round-robin\", got \"by-slot\""}},
      {"missing-names", "[sites]\ndevices = [2, 2]\n", {"sites.names: missing required field"}},
      {"scenario-name-type", ("[scenario]\nname = 3\n" + with_workload(matrix4(good_row_l, good_row_b))),
       {"scenario.name: must be a string, got an integer"}},
  };
}

TEST_F(ScenarioErrors, MissingFile) {
  const std::string path = (dir_ / "does-not-exist.toml").string();
  expect_error([&] { load_scenario(path); }, {path + ": cannot open file"});
}

TEST_F(ScenarioErrors, EveryBadInputIsRejectedWithFileAndField) {
  // The unchanged base files load, so each failure below is caused by the
  // one thing its case breaks.
  EXPECT_NO_THROW(load_scenario(write("good-matrix.toml", matrix4("[1, 0, 50, 50]", "[10, 0, 1, 1]") +
                                                             kGoodWorkload)));
  EXPECT_NO_THROW(load_scenario(write("good-sites.toml", kSites + kGoodWorkload)));
  for (const BadInput& bad : bad_inputs()) {
    SCOPED_TRACE(bad.name);
    const std::string path = write(bad.name + ".toml", bad.toml);
    std::vector<std::string> fragments = bad.fragments;
    fragments.push_back(path + ": ");
    expect_error([&] { load_scenario(path); }, fragments);
  }
}

// Nodes: gpus_per_node consecutive devices of a site, NVLink inside a node,
// the between-node bandwidth shared by the node's GPUs (1/4 each).
TEST(ScenarioNodes, GeoA100NodesByHand) {
  WorkloadOverrides overrides;
  overrides.pipeline_stages = 2;
  const Scenario s = load("geo-a100-nodes.toml", overrides);
  const auto& net = s.network;
  ASSERT_EQ(net.node_of_device.size(), 40u);
  EXPECT_EQ(net.node(0), "Oregon-0");
  EXPECT_EQ(net.node(3), "Oregon-0");
  EXPECT_EQ(net.node(4), "Oregon-1");
  EXPECT_EQ(net.node(39), "Frankfurt-1");
  EXPECT_DOUBLE_EQ(net.bandwidth(0, 3), gbps(2400));         // one node
  EXPECT_DOUBLE_EQ(net.latency(0, 3), 0.005 / 1000);
  EXPECT_DOUBLE_EQ(net.bandwidth(0, 4), gbps(100) / 4);      // two nodes of Oregon
  EXPECT_DOUBLE_EQ(net.latency(0, 4), 0.05 / 1000);
  EXPECT_DOUBLE_EQ(net.bandwidth(0, 8), gbps(0.79) / 4);     // Oregon -> Virginia
  EXPECT_DOUBLE_EQ(net.latency(8, 0), 67.0 / 1000);
}

TEST(ScenarioNodes, SyntaxErrorsNameTheField) {
  const std::string head = two_sites(R"(["a", "b"])", "[4, 4]", 20);
  const Scenario plain = parse_scenario(head + "[workload]\npp = 2\ndp = 4\n", "nodes.toml");
  EXPECT_TRUE(plain.network.node_of_device.empty());  // no gpus_per_node: every device its own node
  const Scenario per_pair = parse_scenario(
      head + "gpus_per_node = 2\nnode_latency_ms = 0.01\nnode_bandwidth_gbps = 800\nnode_shares_links = false\n"
             "[workload]\npp = 2\ndp = 4\n",
      "nodes.toml");
  EXPECT_EQ(per_pair.network.node(1), "a-0");
  EXPECT_EQ(per_pair.network.node(2), "a-1");
  EXPECT_DOUBLE_EQ(per_pair.network.bandwidth(0, 1), gbps(800));
  EXPECT_DOUBLE_EQ(per_pair.network.bandwidth(0, 2), gbps(10));  // not shared
  expect_error([&] { parse_scenario(head + "gpus_per_node = 3\nnode_latency_ms = 0\nnode_bandwidth_gbps = 1\n", "n.toml"); },
               {"sites.devices[0]", "not a multiple of sites.gpus_per_node = 3"});
  expect_error([&] { parse_scenario(head + "gpus_per_node = 2\nnode_latency_ms = 0\n", "n.toml"); },
               {"sites.node_bandwidth_gbps"});
  expect_error([&] { parse_scenario(head + "node_latency_ms = 0\n", "n.toml"); },
               {"sites.node_latency_ms", "needs sites.gpus_per_node"});
}

}  // namespace
