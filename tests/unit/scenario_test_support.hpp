// What the scenario reader's tests share (test_scenario.cpp,
// test_scenario_links.cpp): small scenario texts, the shipped files with
// their sizes, and the check of a one-line InputError.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/scenario.hpp"
#include "geotrain/plan/network.hpp"

namespace geotrain::testing::scenario {

using geotrain::io::Scenario;
using geotrain::io::WorkloadOverrides;
using geotrain::plan::kBytesPerGbit;

// A [sites] table of two sites: 1 ms and 10 Gbps inside a site, 1 Gbps and
// `inter_latency_ms` between them.
inline std::string two_sites(const std::string& names, const std::string& devices, int inter_latency_ms) {
  return "\n[sites]\nnames = " + names + "\ndevices = " + devices +
         "\nintra_latency_ms = 1\nintra_bandwidth_gbps = 10\ninter_latency_ms = " + std::to_string(inter_latency_ms) +
         "\ninter_bandwidth_gbps = 1\n";
}

inline std::string scenario_path(const std::string& file) {
  return std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/scenarios/" + file;
}

inline Scenario load(const std::string& file, const WorkloadOverrides& overrides = {}) {
  return geotrain::io::load_scenario(scenario_path(file), overrides);
}

inline double gbps(double value) { return value * kBytesPerGbit; }

struct Shipped {
  const char* file;
  int devices;
  int pp;
  int dp;
  const char* origin;
  bool workload_from_file;
  bool has_sites = true;
};

// asymmetric-4 has no [workload]; it is loaded with --pp 2.
inline const Shipped kShipped[] = {
    {"on-demand.toml", 64, 8, 8, "dtfm-original", true},
    {"spot.toml", 64, 8, 8, "dtfm-original", true},
    {"multi-dc.toml", 64, 8, 8, "dtfm-original", true},
    {"regional.toml", 64, 8, 8, "dtfm-original", true},
    {"regional-10ms.toml", 64, 8, 8, "dtfm-original", true},
    {"world-wide.toml", 64, 8, 8, "dtfm-original", true},
    {"world-wide-10ms.toml", 64, 8, 8, "dtfm-original", true},
    {"tiny-2x2.toml", 4, 2, 2, "model", true},
    {"two-sites-8.toml", 8, 2, 4, "model", true},
    {"four-sites-16.toml", 16, 4, 4, "model", true},
    {"asymmetric-4.toml", 4, 2, 2, "model", false, false},
    {"emulation-test.toml", 4, 2, 2, "model", true},
    {"regional-mixed.toml", 64, 8, 8, "model", true},
    {"world-wide-mixed.toml", 64, 8, 8, "model", true},
    {"geo-a100-nodes.toml", 40, 2, 20, "model", false},
};

inline Scenario load_shipped(const Shipped& s) {
  WorkloadOverrides overrides;
  if (!s.workload_from_file) overrides.pipeline_stages = 2;
  return load(s.file, overrides);
}

inline void expect_error(const std::function<void()>& action, const std::vector<std::string>& fragments) {
  try {
    action();
    ADD_FAILURE() << "no InputError thrown";
  } catch (const geotrain::InputError& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (const std::string& fragment : fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << message;
    }
  }
}

inline const char* const kGoodWorkload = "\n[workload]\npp = 2\ndp = 2\n";

// A valid 4-device full-matrix network; cases below break one thing each.
inline std::string matrix4(const std::string& latency_row1, const std::string& bandwidth_row1) {
  return "[network]\nlatency_ms = [[0, 1, 50, 50], " + latency_row1 +
         ", [50, 50, 0, 1], [50, 50, 1, 0]]\n"
         "bandwidth_gbps = [[0, 10, 1, 1], " + bandwidth_row1 + ", [1, 1, 0, 10], [1, 1, 10, 0]]\n";
}

}  // namespace geotrain::testing::scenario
