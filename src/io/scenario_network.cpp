// [network]: the full-matrix form, and the matrices' reading and checks
// shared with [sites].
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "scenario_devices.hpp"
#include "scenario_internal.hpp"

namespace geotrain::io::scenario_file {

std::vector<double> Reader::square_matrix(const toml::node& node, const std::string& field, size_t* side) const {
  const toml::array& rows = array(node, field);
  const size_t n = rows.size();
  if (n == 0) fail(field, "must have at least one row");
  check_square_shape(rows, field);
  std::vector<double> values;
  values.reserve(n * n);
  for (size_t i = 0; i < n; ++i) {
    const toml::array& row = *rows.get(i)->as_array();
    for (size_t j = 0; j < n; ++j) {
      values.push_back(number(*row.get(j), field_index(field_index(field, i), j)));
    }
  }
  *side = n;
  return values;
}

void Reader::check_latency_ms(double value, const std::string& field) const {
  if (!(std::isfinite(value) && value >= 0.0)) {
    fail(field, "must be a finite number >= 0, got " + shortest(value), "latency in milliseconds");
  }
}

void Reader::check_bandwidth_gbps(double value, const std::string& field) const {
  if (!(std::isfinite(value) && value > 0.0)) {
    fail(field, "must be a finite number > 0, got " + shortest(value), "bandwidth in Gbit/s");
  }
  // Stored in bytes/s: past ~1.4e300 Gbit/s that is +inf, a free link.
  if (!std::isfinite(bytes_per_s_from_gbps(value))) {
    fail(field, "is too large, got " + shortest(value), "bandwidth in Gbit/s");
  }
}

// Every row must be an array of exactly n entries. A uniformly wide but
// non-square matrix gets its own message; a ragged one names the row.
void Reader::check_square_shape(const toml::array& rows, const std::string& field) const {
  const size_t n = rows.size();
  for (size_t i = 0; i < n; ++i) {
    const toml::node& row = *rows.get(i);
    if (!row.is_array()) fail(field_index(field, i), "must be an array (a matrix row), got " + type_name(row));
  }
  const size_t first_width = rows.get(0)->as_array()->size();
  bool uniform = true;
  for (size_t i = 0; i < n; ++i) uniform = uniform && rows.get(i)->as_array()->size() == first_width;
  if (uniform && first_width != n) {
    fail(field, "must be square, got " + std::to_string(n) + " rows of " + std::to_string(first_width) + " numbers");
  }
  for (size_t i = 0; i < n; ++i) {
    const size_t width = rows.get(i)->as_array()->size();
    if (width != n) {
      fail(field_index(field, i), "row has " + std::to_string(width) + " numbers, expected " + std::to_string(n),
           "the matrix has " + std::to_string(n) + " rows and must be square");
    }
  }
}

void normalise_diagonal(plan::Network& network) {
  const int n = network.device_count;
  for (int u = 0; u < n; ++u) {
    network.latency_s[u * n + u] = 0.0;
    network.bandwidth_bytes_per_s[u * n + u] = kInf;
  }
}

std::vector<double> read_rates_gbps(const Reader& r, const toml::table& table, const std::string& section,
                                    const char* key, size_t count, const char* each) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return {};
  const std::string field = section + "." + key;
  std::vector<double> gbps;
  if (node->is_array()) {
    const toml::array& values = r.array(*node, field);
    if (values.size() != count) {
      r.fail(field, "has " + std::to_string(values.size()) + " numbers for " + std::to_string(count) + " " + each +
             "s", std::string("one number for every ") + each + ", or one number per " + each);
    }
    for (size_t k = 0; k < values.size(); ++k) gbps.push_back(r.number(*values.get(k), field_index(field, k)));
  } else {
    gbps.assign(count, r.number(*node, field));
  }
  for (size_t k = 0; k < gbps.size(); ++k) r.check_bandwidth_gbps(gbps[k], node->is_array() ? field_index(field, k) : field);
  return gbps;
}

bool nics_unlimited(const Reader& r, const toml::table& table, const std::string& section) {
  const toml::node* node = table.get("nic_gbps");
  if (node == nullptr || !node->is_string()) return false;
  const std::string& text = node->as_string()->get();
  if (text != "unlimited") {
    r.fail(section + ".nic_gbps", "is \"" + text + "\"",
           "give Gbit/s (one number, or one per entry), or \"unlimited\" for the pair-only model");
  }
  return true;
}

std::map<std::string, double> uplinks_by_site(const std::vector<std::string>& names, const std::vector<double>& gbps) {
  std::map<std::string, double> uplinks;
  for (size_t k = 0; k < gbps.size(); ++k) uplinks[names[k]] = bytes_per_s_from_gbps(gbps[k]);
  return uplinks;
}

namespace {

// The shared links of a [network] table: NICs per device, an uplink per
// site (sites in the order they first appear in network.sites).
void read_shared_links(const Reader& r, const toml::table& table, plan::Network& network) {
  if (nics_unlimited(r, table, "network")) {
    network.shared.nics = plan::NicSource::unlimited;
  } else {
    for (double gbps : read_rates_gbps(r, table, "network", "nic_gbps", network.device_count, "device")) {
      network.shared.nic_bytes_per_s.push_back(bytes_per_s_from_gbps(gbps));
    }
  }
  if (!table.contains("uplink_gbps")) return;
  std::vector<std::string> names;
  for (const std::string& site : network.site_of_device) {
    if (std::find(names.begin(), names.end(), site) == names.end()) names.push_back(site);
  }
  if (names.empty()) r.fail("network.uplink_gbps", "needs network.sites", "name each device's site");
  network.shared.site_uplink_bytes_per_s =
      uplinks_by_site(names, read_rates_gbps(r, table, "network", "uplink_gbps", names.size(), "site"));
}

plan::Network read_full_matrix_network(const Reader& r, const toml::table& table,
                                       const std::vector<plan::DeviceType>& types) {
  r.check_keys(table, "network", {"latency_ms", "bandwidth_gbps", "sites", "device_type", "nic_gbps", "uplink_gbps"});
  size_t n = 0;
  size_t bandwidth_side = 0;
  const std::vector<double> latency_ms =
      r.square_matrix(r.required(table, "latency_ms", "network.latency_ms"), "network.latency_ms", &n);
  const std::vector<double> bandwidth_gbps = r.square_matrix(
      r.required(table, "bandwidth_gbps", "network.bandwidth_gbps"), "network.bandwidth_gbps", &bandwidth_side);
  if (bandwidth_side != n) {
    r.fail("network.bandwidth_gbps", "is " + std::to_string(bandwidth_side) + " x " + std::to_string(bandwidth_side) +
           " but network.latency_ms is " + std::to_string(n) + " x " + std::to_string(n),
           "both matrices are N x N for N devices");
  }
  if (static_cast<long long>(n) > kMaxDevices) {
    r.fail("network.latency_ms", "has " + std::to_string(n) + " devices, more than " + std::to_string(kMaxDevices));
  }

  plan::Network network;
  network.device_count = static_cast<int>(n);
  network.latency_s.resize(n * n);
  network.bandwidth_bytes_per_s.resize(n * n);
  for (size_t u = 0; u < n; ++u) {
    for (size_t v = 0; v < n; ++v) {
      const size_t k = u * n + v;
      if (u != v) {  // the diagonal may hold any number: it is ignored
        const std::string cell = "[" + std::to_string(u) + "][" + std::to_string(v) + "]";
        r.check_latency_ms(latency_ms[k], "network.latency_ms" + cell);
        r.check_bandwidth_gbps(bandwidth_gbps[k], "network.bandwidth_gbps" + cell);
      }
      network.latency_s[k] = seconds_from_ms(latency_ms[k]);
      network.bandwidth_bytes_per_s[k] = bytes_per_s_from_gbps(bandwidth_gbps[k]);
    }
  }
  normalise_diagonal(network);

  if (const toml::node* sites = table.get("sites")) {
    network.site_of_device = r.strings(*sites, "network.sites");
    if (network.site_of_device.size() != n) {
      r.fail("network.sites", "has " + std::to_string(network.site_of_device.size()) + " names but the network has " +
             std::to_string(n) + " devices", "one site name per device");
    }
  }
  network.type_of_device = read_device_type_list(r, table, "network.device_type", n, "device", types);
  if (network.typed()) network.device_types = types;
  read_shared_links(r, table, network);
  return network;
}

}  // namespace

plan::Network read_network(const Reader& r, const toml::table& root) {
  const toml::table* full = r.optional_table(root, "network", "network");
  const toml::table* sites = r.optional_table(root, "sites", "sites");
  if (full != nullptr && sites != nullptr) {
    r.fail("sites", "cannot be combined with [network]", "describe the network either as [network] matrices or as [sites]");
  }
  const std::vector<plan::DeviceType> types = read_device_types(r, root);
  if (full == nullptr && sites == nullptr) {
    r.fail("network", "missing required field", "add a [network] table with matrices or a [sites] table");
  }
  plan::Network network = full != nullptr ? read_full_matrix_network(r, *full, types) : read_site_network(r, *sites, types);
  plan::assume_nics_where_unstated(network);
  return network;
}

}  // namespace geotrain::io::scenario_file
