// network_to_toml: a network written in the full-matrix form, with file
// numbers that load_scenario converts back to exactly the stored doubles.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <locale>
#include <sstream>
#include <stdexcept>
#include <string>

#include "scenario_internal.hpp"

namespace geotrain::io {
namespace {

using scenario_file::bytes_per_s_from_gbps;
using scenario_file::kInf;
using scenario_file::seconds_from_ms;

// Finds the file value that load_scenario converts back to exactly `stored`.
// The conversions (ms / 1000, Gbps * 1.25e8) are correctly rounded, so the
// answer is within a few ulps of the naive inverse; a short round number is
// preferred when one works. A value that never came from a file may have no
// exact preimage (the conversion skips some doubles); then the naive inverse
// is used and the round trip is off by at most one ulp.
template <class ToStored>
double file_value_for(double stored, double naive, ToStored to_stored) {
  if (!std::isfinite(naive)) return naive;
  char buffer[64];
  const auto printed = std::to_chars(buffer, buffer + sizeof buffer, naive, std::chars_format::general, 15);
  double round = naive;
  std::from_chars(buffer, printed.ptr, round);
  if (to_stored(round) == stored) return round;
  if (to_stored(naive) == stored) return naive;
  double below = naive;
  double above = naive;
  for (int step = 0; step < 8; ++step) {
    below = std::nextafter(below, -kInf);
    above = std::nextafter(above, kInf);
    if (to_stored(below) == stored) return below;
    if (to_stored(above) == stored) return above;
  }
  return naive;
}

// shortest() prints integral values without a '.' ("34", or 21 digits for
// 1.2e20), which TOML reads as an integer and rejects beyond int64; adding
// ".0" keeps every number a TOML float.
std::string toml_number(double value) {
  std::string text = shortest(value);
  if (text.find_first_of(".eEni") == std::string::npos) text += ".0";
  return text;
}

template <class Cell>
void write_matrix(std::ostringstream& out, const char* key, int n, Cell cell) {
  out << key << " = [\n";
  for (int u = 0; u < n; ++u) {
    out << "  [";
    for (int v = 0; v < n; ++v) out << (v ? ", " : "") << (u == v ? std::string("0.0") : toml_number(cell(u, v)));
    out << "],\n";
  }
  out << "]\n";
}

// device_type inside [network], then one [device_types.NAME] table per type.
// memory_gib is bytes / 2^30, exact both ways.
void write_device_types(std::ostringstream& out, const plan::Network& network) {
  if (!network.typed()) return;
  out << "device_type = [";
  for (int d = 0; d < network.device_count; ++d) {
    out << (d == 0 ? "" : (d % 8 == 0 ? ",\n  " : ", ")) << toml_string(network.device_type(d)->name);
  }
  out << "]\n";
  for (const plan::DeviceType& type : network.device_types) {
    out << "\n[device_types." << toml_string(type.name) << "]\n"
        << "tflops = " << toml_number(type.tflops) << "\n"
        << "memory_gib = " << toml_number(type.memory_bytes / plan::kBytesPerGib) << "\n";
  }
}

// A rate in bytes/s as the file's Gbit/s number that reads back exactly.
double file_gbps(double stored) { return file_value_for(stored, stored / plan::kBytesPerGbit, bytes_per_s_from_gbps); }

// NICs as given, "unlimited" where a network has none (the pair-only model
// it stands for) and nothing where they were assumed (reading the file back
// assumes the same); then the sites' uplinks in the order the sites first
// appear.
void write_shared_links(std::ostringstream& out, const plan::Network& network) {
  const plan::SharedLinks& shared = network.shared;
  if (shared.nic_bytes_per_s.empty()) out << "nic_gbps = \"unlimited\"\n";
  if (shared.nics != plan::NicSource::fastest_link && !shared.nic_bytes_per_s.empty()) {
    out << "nic_gbps = [";
    for (size_t d = 0; d < shared.nic_bytes_per_s.size(); ++d) {
      out << (d == 0 ? "" : (d % 8 == 0 ? ",\n  " : ", ")) << toml_number(file_gbps(shared.nic_bytes_per_s[d]));
    }
    out << "]\n";
  }
  if (shared.site_uplink_bytes_per_s.empty()) return;
  std::vector<std::string> order;
  for (const std::string& site : network.site_of_device) {
    if (std::find(order.begin(), order.end(), site) == order.end()) order.push_back(site);
  }
  out << "uplink_gbps = [";
  for (size_t k = 0; k < order.size(); ++k) {
    out << (k == 0 ? "" : ", ") << toml_number(file_gbps(shared.site_uplink_bytes_per_s.at(order[k])));
  }
  out << "]\n";
}

}  // namespace

std::string network_to_toml(const plan::Network& network) {
  const int n = network.device_count;
  const size_t cells = static_cast<size_t>(n) * n;
  if (network.latency_s.size() != cells || network.bandwidth_bytes_per_s.size() != cells) {
    throw std::invalid_argument("network_to_toml: matrices are not N*N");
  }
  std::ostringstream out;
  out.imbue(std::locale::classic());  // no digit grouping, whatever the global locale
  out << "# Network of " << n << " devices in the full-matrix form (see inputs/scenarios/README.md).\n"
      << "# Row = sender, column = receiver; latency in ms, bandwidth in Gbit/s; diagonal ignored.\n"
      << "[network]\n";
  write_matrix(out, "latency_ms", n, [&](int u, int v) {
    const double stored = network.latency(u, v);
    return file_value_for(stored, stored * 1000.0, seconds_from_ms);
  });
  write_matrix(out, "bandwidth_gbps", n, [&](int u, int v) {
    return file_gbps(network.bandwidth(u, v));
  });
  if (!network.site_of_device.empty()) {
    out << "sites = [";
    for (size_t i = 0; i < network.site_of_device.size(); ++i) {
      out << (i == 0 ? "" : (i % 8 == 0 ? ",\n  " : ", ")) << toml_string(network.site_of_device[i]);
    }
    out << "]\n";
  }
  write_shared_links(out, network);
  write_device_types(out, network);
  return out.str();
}

}  // namespace geotrain::io
