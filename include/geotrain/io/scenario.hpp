// Scenario files: a network (site-based or full matrix) and, optionally, the
// workload. Format documented in inputs/scenarios/README.md.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "geotrain/plan/network.hpp"
#include "geotrain/plan/workload.hpp"

namespace geotrain::io {

struct WorkloadOverrides {
  std::optional<int> pipeline_stages;  // --pp
  std::optional<int> data_parallel;    // --dp
  // The network is all the caller needs (geotrain train's network.matrix:
  // the job sets the degrees): the file's [workload] is neither required
  // nor checked against the device count.
  bool network_only = false;
  // Neither the command line nor the file gives pp or dp: not an error,
  // the caller chooses them (geotrain plan's layout search). The workload
  // is then 1 x N and Scenario::degrees_given false.
  bool degrees_optional = false;
};

struct Scenario {
  std::string path;
  std::string name;
  std::string description;
  std::string source;  // [scenario] source: where the numbers come from
  plan::Network network;
  plan::Workload workload;
  bool workload_from_file = false;  // false: from overrides + default model
  bool degrees_given = true;        // false: see WorkloadOverrides::degrees_optional
};

// Throws InputError naming `path` and the offending field. Validates: square
// N*N matrices, finite latency >= 0, finite bandwidth > 0, N == pp*dp.
// The loaded network's diagonal is normalised to latency 0 and bandwidth
// +inf (a device talking to itself costs nothing), whatever the file says.
Scenario load_scenario(const std::string& path, const WorkloadOverrides& overrides = {});

// Same as load_scenario, for TOML text already in memory; `path` is only
// used to name the input in messages and as the default scenario name.
Scenario parse_scenario(std::string_view toml_text, const std::string& path,
                        const WorkloadOverrides& overrides = {});

// Writes `network` in the full-matrix form that load_scenario reads. Loading
// the text back gives identical doubles for every network that load_scenario
// produced; for arbitrary values it is exact or within one ulp (see .cpp).
// The diagonal is written as 0.
std::string network_to_toml(const plan::Network& network);

}  // namespace geotrain::io
