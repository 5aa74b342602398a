#include "launch_files.hpp"

#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "geotrain/common/errors.hpp"

namespace geotrain::cli {
namespace {

// Host names of the devices, checked to be usable in a hostfile.
std::vector<std::string> hosts_of(const plan::Network& network, const std::string& scenario_path) {
  if (network.site_of_device.empty()) {
    throw InputError(scenario_path +
                     ": network.sites: missing; --rankfile/--hostfile/--slurm-hostfile need each rank's host "
                     "(a matrix written by 'geotrain probe' has them)");
  }
  for (std::size_t d = 0; d < network.site_of_device.size(); ++d) {
    const std::string& host = network.site_of_device[d];
    if (host.empty() || host.find_first_of(" \t\n=#") != std::string::npos) {
      throw InputError(scenario_path + ": network.sites[" + std::to_string(d) + "]: '" + host +
                       "' is not a host name");
    }
  }
  return network.site_of_device;
}

}  // namespace

void write_text_file(const std::string& path, const std::string& text, const std::string& option) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) throw RunError(option + " " + path + ": cannot write the file (does its folder exist?)");
}

void write_launch_files(const plan::Network& network, const std::string& scenario_path, const LaunchFiles& files) {
  if (files.rankfile.empty() && files.hostfile.empty() && files.slurm_hostfile.empty()) return;
  const std::vector<std::string> hosts = hosts_of(network, scenario_path);
  std::ostringstream rankfile, hostfile, slurm;
  std::map<std::string, int> slots_used;
  std::vector<std::string> host_order;
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    int& slot = slots_used[hosts[r]];
    if (slot == 0) host_order.push_back(hosts[r]);
    rankfile << "rank " << r << "=" << hosts[r] << " slot=" << slot << "\n";
    slurm << hosts[r] << "\n";
    ++slot;
  }
  for (const std::string& host : host_order) hostfile << host << " slots=" << slots_used[host] << "\n";
  if (!files.rankfile.empty()) write_text_file(files.rankfile, rankfile.str(), "--rankfile");
  if (!files.hostfile.empty()) write_text_file(files.hostfile, hostfile.str(), "--hostfile");
  if (!files.slurm_hostfile.empty()) write_text_file(files.slurm_hostfile, slurm.str(), "--slurm-hostfile");
}

}  // namespace geotrain::cli
