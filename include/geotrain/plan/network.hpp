// Devices and the links between them: the planner's view of the machine.
#pragma once
#include <string>
#include <vector>

namespace geotrain::plan {

// N devices; latency and bandwidth of every ordered pair (row = sender,
// column = receiver). Measured matrices are not symmetric, so the planner
// never assumes they are. The diagonal is ignored everywhere.
struct Network {
  int device_count = 0;
  std::vector<double> latency_s;            // N*N, seconds
  std::vector<double> bandwidth_bytes_per_s;  // N*N, bytes per second
  std::vector<std::string> site_of_device;  // optional: site name per device

  double latency(int from, int to) const { return latency_s[from * device_count + to]; }
  double bandwidth(int from, int to) const {
    return bandwidth_bytes_per_s[from * device_count + to];
  }
  // Seconds to move `bytes` from `from` to `to` under the alpha-beta model.
  double transfer_s(int from, int to, double bytes) const {
    return latency(from, to) + bytes / bandwidth(from, to);
  }
  std::string site(int device) const {
    return site_of_device.empty() ? std::string() : site_of_device[device];
  }
};

// Builds a network from per-device site labels and site-to-site link tables
// (the form in which the paper gives its scenarios). `site_latency_s` and
// `site_bandwidth_bytes_per_s` are S*S matrices, diagonal = inside a site.
Network network_from_sites(const std::vector<int>& site_index_of_device,
                           const std::vector<std::string>& site_names,
                           const std::vector<double>& site_latency_s,
                           const std::vector<double>& site_bandwidth_bytes_per_s);

// The links among `devices` alone, renumbered 0..k-1 in the order given.
Network subnetwork(const Network& network, const std::vector<int>& devices);

constexpr double kBytesPerGbit = 1e9 / 8.0;  // 1 Gbit/s = 1.25e8 bytes/s

}  // namespace geotrain::plan
