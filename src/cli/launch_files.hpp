// Files that launch a job with rank r on the host that was device r when the
// network was probed, so that a plan computed from that matrix (geotrain plan,
// or geotrain train with network.matrix = the same file) places each stage on
// the host it was planned for.
#pragma once
#include <string>

#include "geotrain/plan/network.hpp"

namespace geotrain::cli {

struct LaunchFiles {
  std::string rankfile;        // Open MPI: "rank R=HOST slot=K"
  std::string hostfile;        // Open MPI: "HOST slots=N", hosts in rank order
  std::string slurm_hostfile;  // Slurm: one host per line, line r = rank r
};

// Writes the files whose paths are non-empty; InputError naming the scenario
// and network.sites when the network names no hosts.
void write_launch_files(const plan::Network& network, const std::string& scenario_path, const LaunchFiles& files);

// Writes `text` to `path`; RunError naming the path and `option` on failure.
void write_text_file(const std::string& path, const std::string& text, const std::string& option);

}  // namespace geotrain::cli
