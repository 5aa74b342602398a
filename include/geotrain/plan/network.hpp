// Devices and the links between them: the planner's view of the machine.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace geotrain::plan {

// A kind of device (scenario files: [device_types.NAME]). `tflops` is the
// device's dense throughput at the run's precision, in the same sense as the
// simulator's peak_tflops: the simulator multiplies it by the model's
// efficiency, so a type with the default 125 TFLOPS computes exactly as an
// untyped device does.
struct DeviceType {
  std::string name;
  double tflops = 0;
  double memory_bytes = 0;
};

// Where a network's NIC rates come from. Scenario files and probed networks
// that give none get each device's fastest link (fastest_link: what one
// device can send at once, not unlimited fan-out); `nic_gbps = "unlimited"`
// asks for the pair-only model (the DT-FM paper's scenarios); geotrain probe
// measures them (probed).
enum class NicSource { given, fastest_link, unlimited, probed };

// What transfers share beyond their pair link (flow_sharing.hpp), each
// direction separately (full duplex), bytes/s. Left out: unlimited, and with
// nothing given every transfer runs at its pair's full rate at once (the
// pair-only model of the DT-FM cost model).
struct SharedLinks {
  // Per device: its NIC, for everything it sends and, separately, receives.
  std::vector<double> nic_bytes_per_s;
  NicSource nics = NicSource::given;
  // Per site name: its uplink, what all transfers between its devices and
  // other sites share (one direction each).
  std::map<std::string, double> site_uplink_bytes_per_s;

  bool any() const { return !nic_bytes_per_s.empty() || !site_uplink_bytes_per_s.empty(); }
};

// N devices; latency and bandwidth of every ordered pair (row = sender,
// column = receiver). Measured matrices are not symmetric, so the planner
// never assumes they are. The diagonal is ignored everywhere.
struct Network {
  int device_count = 0;
  std::vector<double> latency_s;            // N*N, seconds
  std::vector<double> bandwidth_bytes_per_s;  // N*N, bytes per second
  std::vector<std::string> site_of_device;  // optional: site name per device
  // Optional: node (machine) name per device, unique across sites. Devices
  // of one node can form a tensor-parallel group (tensor_parallel.hpp);
  // empty: every device is a node of its own.
  std::vector<std::string> node_of_device;
  // Optional: device_types[type_of_device[d]] is device d's type. Empty:
  // every device is the same (the simulator's and the caller's defaults).
  std::vector<DeviceType> device_types;
  std::vector<int> type_of_device;
  SharedLinks shared;

  double latency(int from, int to) const { return latency_s[from * device_count + to]; }
  double bandwidth(int from, int to) const {
    return bandwidth_bytes_per_s[from * device_count + to];
  }
  // Seconds to move `bytes` from `from` to `to` under the alpha-beta model.
  double transfer_s(int from, int to, double bytes) const {
    return latency(from, to) + bytes / bandwidth(from, to);
  }
  // By reference: the simulator compares sites per transfer, millions of
  // times in a layout search at 1,000 devices.
  const std::string& site(int device) const {
    static const std::string none;
    return site_of_device.empty() ? none : site_of_device[device];
  }
  // Device d's node; without node labels, a name of its own ("#d").
  std::string node(int device) const {
    return node_of_device.empty() ? "#" + std::to_string(device) : node_of_device[device];
  }
  bool typed() const { return !type_of_device.empty(); }
  // Device d's type; null on an untyped network.
  const DeviceType* device_type(int device) const {
    return typed() ? &device_types[type_of_device[device]] : nullptr;
  }
  // Per device: its type's TFLOPS, or `untyped_tflops` for every device.
  std::vector<double> device_tflops(double untyped_tflops) const;
  // Per device: its type's memory in bytes, or `untyped_bytes` (0: unknown, unlimited).
  std::vector<double> device_memory_bytes(double untyped_bytes) const;
};

// Builds a network from per-device site labels and site-to-site link tables
// (the form in which the paper gives its scenarios). `site_latency_s` and
// `site_bandwidth_bytes_per_s` are S*S matrices, diagonal = inside a site.
Network network_from_sites(const std::vector<int>& site_index_of_device,
                           const std::vector<std::string>& site_names,
                           const std::vector<double>& site_latency_s,
                           const std::vector<double>& site_bandwidth_bytes_per_s);

// Every device's NIC at its fastest link (the larger of its fastest send and
// receive), where `network` gives no NICs: what one device can send at
// once, instead of unlimited fan-out.
SharedLinks nics_at_fastest_link(const Network& network);
// The default of scenario files and probed networks: NICs at the fastest
// link where none are given, unless NicSource::unlimited was asked for.
void assume_nics_where_unstated(Network& network);

// Sites in a measured network (geotrain probe; its host names are nodes,
// not sites): devices whose one-way latency, the larger direction, stays
// under a gap are one site. The gap is the lowest step between consecutive
// pair latencies (sorted) of at least kSiteLatencyStep x onto a latency of
// at least kSiteMinLatencyS: inside a cluster latencies are tens of
// microseconds, between sites milliseconds. No such step: one site. Sites
// numbered in order of their first device.
inline constexpr double kSiteLatencyStep = 3.0;
inline constexpr double kSiteMinLatencyS = 1e-3;
std::vector<int> sites_by_latency(const Network& network);

// What the network's transfers share, in words (the capacities the
// simulator assumes), for reports.
std::string describe_shared_links(const Network& network);

// The links (and device types, sites, nodes and shared links) among `devices` alone, renumbered 0..k-1 in
// the order given.
Network subnetwork(const Network& network, const std::vector<int>& devices);

constexpr double kBytesPerGbit = 1e9 / 8.0;  // 1 Gbit/s = 1.25e8 bytes/s
constexpr double kBytesPerGib = 1024.0 * 1024.0 * 1024.0;

}  // namespace geotrain::plan
