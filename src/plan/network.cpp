#include "geotrain/plan/network.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdio>

#include "geotrain/common/errors.hpp"

namespace geotrain::plan {

Network network_from_sites(const std::vector<int>& site_index_of_device,
                           const std::vector<std::string>& site_names,
                           const std::vector<double>& site_latency_s,
                           const std::vector<double>& site_bandwidth_bytes_per_s) {
  const int sites = static_cast<int>(site_names.size());
  if (site_latency_s.size() != static_cast<size_t>(sites) * sites ||
      site_bandwidth_bytes_per_s.size() != static_cast<size_t>(sites) * sites) {
    throw InputError("network_from_sites: site tables must be S*S");
  }
  Network network;
  const int n = static_cast<int>(site_index_of_device.size());
  network.device_count = n;
  network.latency_s.assign(static_cast<size_t>(n) * n, 0.0);
  network.bandwidth_bytes_per_s.assign(static_cast<size_t>(n) * n, 0.0);
  network.site_of_device.reserve(n);
  for (int u = 0; u < n; ++u) {
    const int su = site_index_of_device[u];
    if (su < 0 || su >= sites) throw InputError("network_from_sites: bad site index");
    network.site_of_device.push_back(site_names[su]);
    for (int v = 0; v < n; ++v) {
      const int sv = site_index_of_device[v];
      network.latency_s[u * n + v] = site_latency_s[su * sites + sv];
      network.bandwidth_bytes_per_s[u * n + v] = site_bandwidth_bytes_per_s[su * sites + sv];
    }
  }
  return network;
}

Network subnetwork(const Network& network, const std::vector<int>& devices) {
  Network sub;
  const int k = static_cast<int>(devices.size());
  sub.device_count = k;
  sub.latency_s.reserve(static_cast<size_t>(k) * k);
  sub.bandwidth_bytes_per_s.reserve(static_cast<size_t>(k) * k);
  sub.device_types = network.device_types;
  sub.shared.site_uplink_bytes_per_s = network.shared.site_uplink_bytes_per_s;
  sub.shared.nics = network.shared.nics;
  for (int u : devices) {
    if (!network.site_of_device.empty()) sub.site_of_device.push_back(network.site_of_device[u]);
    if (!network.node_of_device.empty()) sub.node_of_device.push_back(network.node_of_device[u]);
    if (network.typed()) sub.type_of_device.push_back(network.type_of_device[u]);
    if (!network.shared.nic_bytes_per_s.empty()) sub.shared.nic_bytes_per_s.push_back(network.shared.nic_bytes_per_s[u]);
    for (int v : devices) {
      sub.latency_s.push_back(network.latency(u, v));
      sub.bandwidth_bytes_per_s.push_back(network.bandwidth(u, v));
    }
  }
  return sub;
}

SharedLinks nics_at_fastest_link(const Network& network) {
  SharedLinks links = network.shared;
  if (!links.nic_bytes_per_s.empty()) return links;
  const int n = network.device_count;
  links.nic_bytes_per_s.assign(n, 0.0);
  links.nics = NicSource::fastest_link;
  for (int u = 0; u < n; ++u) {
    for (int v = 0; v < n; ++v) {
      if (u == v) continue;
      links.nic_bytes_per_s[u] = std::max({links.nic_bytes_per_s[u], network.bandwidth(u, v), network.bandwidth(v, u)});
    }
  }
  if (n == 1) links.nic_bytes_per_s.clear();  // nothing to send to
  return links;
}

void assume_nics_where_unstated(Network& network) {
  if (network.shared.nics != NicSource::unlimited) network.shared = nics_at_fastest_link(network);
}

std::string describe_shared_links(const Network& network) {
  const SharedLinks& shared = network.shared;
  if (!shared.any()) {
    return std::string(shared.nics == NicSource::unlimited ? "unlimited (nic_gbps = \"unlimited\")" : "none given") +
           ": every transfer at its pair's full rate at once (the pair-only model), however many share a device or "
           "a site";
  }
  auto gbps = [](double bytes_per_s) {
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", bytes_per_s / kBytesPerGbit);
    return std::string(text);
  };
  std::string text;
  if (!shared.nic_bytes_per_s.empty()) {
    const auto [low, high] = std::minmax_element(shared.nic_bytes_per_s.begin(), shared.nic_bytes_per_s.end());
    text = "NICs " + gbps(*low) + (*low == *high ? "" : "-" + gbps(*high)) + " Gbit/s each way";
    if (shared.nics == NicSource::probed) text += " (probed: every other rank sending to each at once)";
    if (shared.nics == NicSource::fastest_link) {
      text += " (assumed: each device's fastest link, as no NIC rates were given; nic_gbps sets them, \"unlimited\" "
              "gives the pair-only model)";
    }
  } else {
    text = "NICs unlimited";
  }
  if (!shared.site_uplink_bytes_per_s.empty()) {
    text += "; site uplinks";
    for (const auto& [site, rate] : shared.site_uplink_bytes_per_s) text += " " + site + " " + gbps(rate);
    text += " Gbit/s each way";
  }
  return text;
}

std::vector<double> Network::device_tflops(double untyped_tflops) const {
  std::vector<double> tflops(device_count, untyped_tflops);
  for (int d = 0; d < device_count && typed(); ++d) tflops[d] = device_type(d)->tflops;
  return tflops;
}

std::vector<double> Network::device_memory_bytes(double untyped_bytes) const {
  std::vector<double> bytes(device_count, untyped_bytes);
  for (int d = 0; d < device_count && typed(); ++d) bytes[d] = device_type(d)->memory_bytes;
  return bytes;
}

std::vector<int> sites_by_latency(const Network& network) {
  const int n = network.device_count;
  auto apart = [&](int u, int v) { return std::max(network.latency(u, v), network.latency(v, u)); };
  std::vector<double> latencies;
  for (int u = 0; u < n; ++u) {
    for (int v = u + 1; v < n; ++v) latencies.push_back(apart(u, v));
  }
  std::sort(latencies.begin(), latencies.end());
  double gap = std::numeric_limits<double>::infinity();
  for (size_t k = 1; k < latencies.size() && !std::isfinite(gap); ++k) {
    const double below = latencies[k - 1], above = latencies[k];
    if (above >= kSiteMinLatencyS && above >= kSiteLatencyStep * below) gap = below > 0 ? std::sqrt(below * above) : 0.5 * above;
  }
  // Single linkage under the gap: a device joins the site of any device it is close to.
  std::vector<int> site(static_cast<size_t>(n), -1);
  int sites = 0;
  for (int first = 0; first < n; ++first) {
    if (site[first] >= 0) continue;
    std::vector<int> reached{first};
    site[first] = sites;
    for (size_t k = 0; k < reached.size(); ++k) {
      for (int v = 0; v < n; ++v) {
        if (site[v] < 0 && apart(reached[k], v) < gap) site[v] = sites, reached.push_back(v);
      }
    }
    ++sites;
  }
  return site;
}

}  // namespace geotrain::plan
