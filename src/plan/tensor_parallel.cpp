#include "geotrain/plan/tensor_parallel.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "geotrain/common/errors.hpp"

namespace geotrain::plan {

std::vector<std::vector<int>> node_tensor_groups(const Network& net, int t) {
  if (t < 1) throw InputError("tensor parallel degree must be >= 1, got " + std::to_string(t));
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> members;
  for (int d = 0; d < net.device_count; ++d) {
    auto [it, fresh] = members.try_emplace(net.node(d));
    if (fresh) order.push_back(it->first);
    it->second.push_back(d);
  }
  std::vector<std::vector<int>> groups;
  for (const std::string& node : order) {
    const auto& devices = members[node];
    for (size_t i = 0; i + t <= devices.size(); i += t) groups.emplace_back(devices.begin() + i, devices.begin() + i + t);
  }
  return groups;
}

TensorUnits tensor_units(const Network& net, const std::vector<std::vector<int>>& groups, double untyped_tflops,
                         double untyped_memory_bytes, double efficiency) {
  if (groups.empty()) throw InputError("tensor_units: no groups");
  const int t = static_cast<int>(groups[0].size());
  if (!(efficiency > 0)) throw InputError("tensor_units: efficiency must be > 0");
  std::vector<char> seen(net.device_count, 0);
  for (const auto& g : groups) {
    if (static_cast<int>(g.size()) != t || t < 1) throw InputError("tensor_units: groups of different sizes");
    for (int d : g) {
      if (d < 0 || d >= net.device_count || seen[d]) {
        throw InputError("tensor_units: device " + std::to_string(d) + " out of range or in two groups");
      }
      if (net.node(d) != net.node(g[0])) {
        throw InputError("tensor_units: devices " + std::to_string(g[0]) + " and " + std::to_string(d) +
                         " are on different nodes");
      }
      seen[d] = 1;
    }
  }
  const std::vector<double> tflops = net.device_tflops(untyped_tflops);
  const std::vector<double> memory = net.device_memory_bytes(untyped_memory_bytes);
  TensorUnits units;
  units.tensor_parallel = t;
  units.groups = groups;
  const int n = static_cast<int>(groups.size());
  Network& un = units.network;
  un = counterpart_network(net, groups);
  std::map<std::pair<double, double>, int> type_index;
  for (int u = 0; u < n; ++u) {
    const auto& g = groups[u];
    // Speed and memory: the slowest and the smallest member.
    int slowest = g[0];
    double least_memory = memory[g[0]];
    for (int d : g) {
      if (tflops[d] < tflops[slowest]) slowest = d;
      least_memory = std::min(least_memory, memory[d]);
    }
    const double speed = t * tflops[slowest] * (t > 1 ? efficiency : 1.0);
    auto [it, fresh] = type_index.try_emplace({speed, least_memory}, static_cast<int>(un.device_types.size()));
    if (fresh) {
      const std::string base = net.typed() ? net.device_type(slowest)->name : std::string("device");
      un.device_types.push_back({t > 1 ? base + " x" + std::to_string(t) : base, speed, least_memory});
    }
    un.type_of_device.push_back(it->second);
    // The ring inside the unit: its slowest hop.
    double ring_latency = 0, ring_bandwidth = t > 1 ? std::numeric_limits<double>::infinity() : 0.0;
    for (int i = 0; i < t && t > 1; ++i) {
      const int a = g[i], b = g[(i + 1) % t];
      ring_latency = std::max(ring_latency, net.latency(a, b));
      ring_bandwidth = std::min(ring_bandwidth, net.bandwidth(a, b));
    }
    units.ring_latency_s.push_back(ring_latency);
    units.ring_bandwidth_bytes_per_s.push_back(ring_bandwidth);
  }
  return units;
}

Network counterpart_network(const Network& net, const std::vector<std::vector<int>>& groups) {
  const int n = static_cast<int>(groups.size());
  for (const auto& g : groups) {
    if (g.empty() || g.size() != groups[0].size()) throw InputError("counterpart_network: groups of different sizes");
    for (int d : g) {
      if (d < 0 || d >= net.device_count) throw InputError("counterpart_network: device " + std::to_string(d) + " out of range");
    }
  }
  Network un;
  un.device_count = n;
  un.latency_s.assign(static_cast<size_t>(n) * n, 0.0);
  un.bandwidth_bytes_per_s.assign(static_cast<size_t>(n) * n, 0.0);
  for (int u = 0; u < n; ++u) {
    const auto& g = groups[u];
    if (!net.site_of_device.empty()) un.site_of_device.push_back(net.site_of_device[g[0]]);
    un.node_of_device.push_back(net.node(g[0]));
    // Counterparts: member i of u talks to member i of v.
    for (int v = 0; v < n; ++v) {
      if (v == u) continue;
      double latency = 0, bandwidth = std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < g.size(); ++i) {
        latency = std::max(latency, net.latency(g[i], groups[v][i]));
        bandwidth = std::min(bandwidth, net.bandwidth(g[i], groups[v][i]));
      }
      un.latency_s[static_cast<size_t>(u) * n + v] = latency;
      un.bandwidth_bytes_per_s[static_cast<size_t>(u) * n + v] = bandwidth;
    }
  }
  // Shared links: a unit's transfer stands for its t members' transfers in
  // parallel, each through its own NIC (the unit's: the slowest member's)
  // and all through their sites' uplinks (a unit gets 1/t of each).
  un.shared.nics = net.shared.nics;
  if (!net.shared.nic_bytes_per_s.empty()) {
    for (const auto& g : groups) {
      double slowest = std::numeric_limits<double>::infinity();
      for (int d : g) slowest = std::min(slowest, net.shared.nic_bytes_per_s[d]);
      un.shared.nic_bytes_per_s.push_back(slowest);
    }
  }
  for (const auto& [site, rate] : net.shared.site_uplink_bytes_per_s) {
    un.shared.site_uplink_bytes_per_s[site] = rate / static_cast<double>(groups.empty() ? 1 : groups[0].size());
  }
  return un;
}

std::vector<int> tensor_parallel_choices(const Network& net, const ModelShape& model, const std::vector<int>& wanted) {
  std::map<std::string, int> node_size;
  for (int d = 0; d < net.device_count; ++d) ++node_size[net.node(d)];
  int largest = 0;
  for (const auto& [node, size] : node_size) largest = std::max(largest, size);
  std::vector<int> choices;
  for (int t : wanted) {
    if (t < 1 || t > largest || model.heads % t != 0 || model.hidden % t != 0) continue;
    if (std::find(choices.begin(), choices.end(), t) == choices.end()) choices.push_back(t);
  }
  std::sort(choices.begin(), choices.end());
  return choices;
}

}  // namespace geotrain::plan
