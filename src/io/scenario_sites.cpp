// [sites]: the site-based form. Each site holds some devices; the links
// between and inside sites come from S x S matrices, or from intra_/inter_
// scalars refined per pair by [[sites.link]]; gpus_per_node groups a site's
// devices into nodes.
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "scenario_devices.hpp"
#include "scenario_internal.hpp"

namespace geotrain::io::scenario_file {
namespace {

struct SiteLayout {
  std::vector<std::string> names;
  std::vector<int> devices;           // devices per site
  std::vector<int> site_of_device;    // index into names, per device
};

// Site-to-site values in file units, S*S; empty until some input gives them.
struct SiteLinks {
  std::vector<std::optional<double>> latency_ms;
  std::vector<std::optional<double>> bandwidth_gbps;
};

std::vector<std::string> read_site_names(const Reader& r, const toml::table& table) {
  std::vector<std::string> names = r.strings(r.required(table, "names", "sites.names"), "sites.names");
  if (names.empty()) r.fail("sites.names", "must name at least one site");
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) r.fail(field_index("sites.names", i), "must not be empty");
    for (size_t j = 0; j < i; ++j) {
      if (names[j] == names[i]) {
        r.fail(field_index("sites.names", i), "duplicate site name \"" + names[i] + "\"",
               "also sites.names[" + std::to_string(j) + "]");
      }
    }
  }
  return names;
}

std::vector<int> read_site_devices(const Reader& r, const toml::table& table, size_t site_count) {
  const toml::array& items = r.array(r.required(table, "devices", "sites.devices"), "sites.devices");
  if (items.size() != site_count) {
    r.fail("sites.devices", "has " + std::to_string(items.size()) + " entries but sites.names has " +
           std::to_string(site_count), "one device count per site");
  }
  std::vector<int> devices;
  long long total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    devices.push_back(r.positive_int(*items.get(i), field_index("sites.devices", i)));
    total += devices.back();
    if (total > kMaxDevices) {
      r.fail("sites.devices", "more than " + std::to_string(kMaxDevices) + " devices in total");
    }
  }
  return devices;
}

// "blocked": site 0 holds the first devices, then site 1, ...
// "round-robin": device i goes to the next site (cyclically) with room left,
// the way mpirun maps ranks by node.
std::vector<int> assign_devices(const Reader& r, const toml::table& table, const std::vector<int>& devices) {
  const std::string order = r.optional_string(table, "device_order", "sites.device_order").value_or("blocked");
  std::vector<int> site_of_device;
  const int sites = static_cast<int>(devices.size());
  if (order == "blocked") {
    for (int s = 0; s < sites; ++s) site_of_device.insert(site_of_device.end(), devices[s], s);
  } else if (order == "round-robin") {
    std::vector<int> room = devices;
    int total = 0;
    for (int count : devices) total += count;
    int site = 0;
    for (int device = 0; device < total; ++device) {
      while (room[site] == 0) site = (site + 1) % sites;
      site_of_device.push_back(site);
      --room[site];
      site = (site + 1) % sites;
    }
  } else {
    r.fail("sites.device_order", "must be \"blocked\" or \"round-robin\", got \"" + order + "\"");
  }
  return site_of_device;
}

// An entry matters if it is between two sites, or inside a site that has at
// least two devices; other diagonal entries are never used.
bool site_pair_used(const SiteLayout& layout, size_t a, size_t b) {
  return a != b || layout.devices[a] > 1;
}

void read_site_matrices(const Reader& r, const toml::table& table, const SiteLayout& layout, SiteLinks& links) {
  const size_t s = layout.names.size();
  for (const char* key : {"latency_ms", "bandwidth_gbps"}) {
    const std::string field = field_key("sites", key);
    size_t side = 0;
    const std::vector<double> values = r.square_matrix(r.required(table, key, field), field, &side);
    if (side != s) {
      r.fail(field, "is " + std::to_string(side) + " x " + std::to_string(side) + " but there are " +
             std::to_string(s) + " sites", "one row and one column per entry of sites.names");
    }
    const bool is_latency = std::string_view(key) == "latency_ms";
    for (size_t a = 0; a < s; ++a) {
      for (size_t b = 0; b < s; ++b) {
        if (!site_pair_used(layout, a, b)) continue;
        const double value = values[a * s + b];
        const std::string cell = field + "[" + std::to_string(a) + "][" + std::to_string(b) + "]";
        if (is_latency) {
          r.check_latency_ms(value, cell);
          links.latency_ms[a * s + b] = value;
        } else {
          r.check_bandwidth_gbps(value, cell);
          links.bandwidth_gbps[a * s + b] = value;
        }
      }
    }
  }
}

void read_site_scalars(const Reader& r, const toml::table& table, size_t s, SiteLinks& links) {
  auto read = [&](const char* key, bool is_latency) {
    const std::string field = field_key("sites", key);
    const std::optional<double> value = r.optional_number(table, key, field);
    if (value) is_latency ? r.check_latency_ms(*value, field) : r.check_bandwidth_gbps(*value, field);
    return value;
  };
  const auto intra_latency = read("intra_latency_ms", true);
  const auto intra_bandwidth = read("intra_bandwidth_gbps", false);
  const auto inter_latency = read("inter_latency_ms", true);
  const auto inter_bandwidth = read("inter_bandwidth_gbps", false);
  for (size_t a = 0; a < s; ++a) {
    for (size_t b = 0; b < s; ++b) {
      links.latency_ms[a * s + b] = a == b ? intra_latency : inter_latency;
      links.bandwidth_gbps[a * s + b] = a == b ? intra_bandwidth : inter_bandwidth;
    }
  }
}

size_t site_index(const Reader& r, const SiteLayout& layout, const std::string& name, const std::string& field) {
  const auto it = std::find(layout.names.begin(), layout.names.end(), name);
  if (it == layout.names.end()) r.fail(field, "site \"" + name + "\" is not in sites.names");
  return static_cast<size_t>(it - layout.names.begin());
}

// [[sites.link]] entries refine the scalars for one pair, in both directions.
// between = [A, A] sets the link inside site A.
void read_site_link_overrides(const Reader& r, const toml::node& node, const SiteLayout& layout, SiteLinks& links) {
  const toml::array& entries = r.array(node, "sites.link");
  const size_t s = layout.names.size();
  std::vector<int> given_by(s * s, -1);  // which entry already set a pair
  for (size_t k = 0; k < entries.size(); ++k) {
    const std::string field = field_index("sites.link", k);
    const toml::node& entry_node = *entries.get(k);
    if (!entry_node.is_table()) r.fail(field, "must be a table ([[sites.link]]), got " + type_name(entry_node));
    const toml::table& entry = *entry_node.as_table();
    r.check_keys(entry, field, {"between", "latency_ms", "bandwidth_gbps"});

    const std::vector<std::string> between =
        r.strings(r.required(entry, "between", field + ".between"), field + ".between");
    if (between.size() != 2) {
      r.fail(field + ".between", "must name exactly 2 sites, got " + std::to_string(between.size()));
    }
    const size_t a = site_index(r, layout, between[0], field + ".between[0]");
    const size_t b = site_index(r, layout, between[1], field + ".between[1]");
    if (given_by[a * s + b] >= 0) {
      r.fail(field + ".between", "the pair " + between[0] + " - " + between[1] + " is already given",
             "by sites.link[" + std::to_string(given_by[a * s + b]) + "]");
    }
    given_by[a * s + b] = given_by[b * s + a] = static_cast<int>(k);

    const auto latency = r.optional_number(entry, "latency_ms", field + ".latency_ms");
    const auto bandwidth = r.optional_number(entry, "bandwidth_gbps", field + ".bandwidth_gbps");
    if (!latency && !bandwidth) r.fail(field, "needs latency_ms or bandwidth_gbps (or both)");
    if (latency) {
      r.check_latency_ms(*latency, field + ".latency_ms");
      links.latency_ms[a * s + b] = links.latency_ms[b * s + a] = latency;
    }
    if (bandwidth) {
      r.check_bandwidth_gbps(*bandwidth, field + ".bandwidth_gbps");
      links.bandwidth_gbps[a * s + b] = links.bandwidth_gbps[b * s + a] = bandwidth;
    }
  }
}

// Every used pair needs both values; the message names the scalar that
// would have supplied the missing one.
void check_site_links_complete(const Reader& r, const SiteLayout& layout, const SiteLinks& links) {
  const size_t s = layout.names.size();
  for (size_t a = 0; a < s; ++a) {
    for (size_t b = 0; b < s; ++b) {
      if (!site_pair_used(layout, a, b)) continue;
      const std::string scope = a == b ? "intra" : "inter";
      const std::string pair = a == b ? "inside " + layout.names[a] : layout.names[a] + " - " + layout.names[b];
      if (!links.latency_ms[a * s + b]) {
        r.fail("sites." + scope + "_latency_ms", "missing required field",
               "no latency for " + pair + "; give it or a [[sites.link]] for that pair");
      }
      if (!links.bandwidth_gbps[a * s + b]) {
        r.fail("sites." + scope + "_bandwidth_gbps", "missing required field",
               "no bandwidth for " + pair + "; give it or a [[sites.link]] for that pair");
      }
    }
  }
}

SiteLinks read_site_links(const Reader& r, const toml::table& table, const SiteLayout& layout) {
  const size_t s = layout.names.size();
  SiteLinks links{std::vector<std::optional<double>>(s * s), std::vector<std::optional<double>>(s * s)};
  const char* matrix_key = table.contains("latency_ms") ? "latency_ms"
                           : table.contains("bandwidth_gbps") ? "bandwidth_gbps" : nullptr;
  const char* scalar_key = nullptr;
  for (const char* key : {"intra_latency_ms", "intra_bandwidth_gbps", "inter_latency_ms", "inter_bandwidth_gbps"}) {
    if (scalar_key == nullptr && table.contains(key)) scalar_key = key;
  }
  const toml::node* link = table.get("link");

  if (matrix_key != nullptr) {
    if (scalar_key != nullptr) {
      r.fail(field_key("sites", scalar_key), "cannot be combined with sites." + std::string(matrix_key),
             "give either S x S matrices or intra_/inter_ scalars");
    }
    if (link != nullptr) {
      r.fail("sites.link", "cannot be combined with sites." + std::string(matrix_key),
             "the matrices already give every pair; [[sites.link]] refines the scalars");
    }
    read_site_matrices(r, table, layout, links);
    return links;
  }
  if (scalar_key == nullptr && link == nullptr) {
    r.fail("sites.latency_ms", "missing required field",
           "give latency_ms and bandwidth_gbps matrices, or intra_/inter_ scalars and/or [[sites.link]]");
  }
  read_site_scalars(r, table, s, links);
  if (link != nullptr) read_site_link_overrides(r, *link, layout, links);
  check_site_links_complete(r, layout, links);
  return links;
}

// Nodes (tensor parallelism groups devices of one node): gpus_per_node
// consecutive devices of a site (in id order) form a node, named
// "<site>-<k>"; the link inside a node is node_latency_ms /
// node_bandwidth_gbps. node_shares_links (default true): the site tables'
// bandwidth between devices of different nodes is the node's, shared by its
// GPUs, so each device pair gets 1/gpus_per_node of it (the fair share when
// all of a node's GPUs communicate at once, as in the gradient exchange).
void read_site_nodes(const Reader& r, const toml::table& table, const SiteLayout& layout, plan::Network& network) {
  const std::optional<int> per_node = r.optional_positive_int(table, "gpus_per_node", "sites.gpus_per_node");
  if (!per_node) {
    for (const char* key : {"node_latency_ms", "node_bandwidth_gbps", "node_shares_links"}) {
      if (table.contains(key)) r.fail(field_key("sites", key), "needs sites.gpus_per_node", "GPUs per node, e.g. 4");
    }
    return;
  }
  const int g = *per_node;
  for (size_t site = 0; site < layout.devices.size(); ++site) {
    if (layout.devices[site] % g != 0) {
      r.fail(field_index("sites.devices", site), "has " + std::to_string(layout.devices[site]) +
             " devices, not a multiple of sites.gpus_per_node = " + std::to_string(g));
    }
  }
  const double node_latency_ms = r.number(r.required(table, "node_latency_ms", "sites.node_latency_ms"),
                                          "sites.node_latency_ms");
  r.check_latency_ms(node_latency_ms, "sites.node_latency_ms");
  const double node_gbps = r.number(r.required(table, "node_bandwidth_gbps", "sites.node_bandwidth_gbps"),
                                    "sites.node_bandwidth_gbps");
  r.check_bandwidth_gbps(node_gbps, "sites.node_bandwidth_gbps");
  bool shares = true;
  if (const toml::node* node = table.get("node_shares_links")) {
    if (!node->is_boolean()) r.fail("sites.node_shares_links", "must be true or false, got " + type_name(*node));
    shares = node->as_boolean()->get();
  }
  const int n = network.device_count;
  std::vector<int> seen(layout.names.size(), 0);
  for (int d = 0; d < n; ++d) {
    const int site = layout.site_of_device[d];
    network.node_of_device.push_back(layout.names[site] + "-" + std::to_string(seen[site]++ / g));
  }
  for (int u = 0; u < n; ++u) {
    for (int v = 0; v < n; ++v) {
      if (u == v) continue;
      const size_t k = static_cast<size_t>(u) * n + v;
      if (network.node_of_device[u] == network.node_of_device[v]) {
        network.latency_s[k] = seconds_from_ms(node_latency_ms);
        network.bandwidth_bytes_per_s[k] = bytes_per_s_from_gbps(node_gbps);
      } else if (shares) {
        network.bandwidth_bytes_per_s[k] /= g;
      }
    }
  }
}

}  // namespace

plan::Network read_site_network(const Reader& r, const toml::table& table,
                                const std::vector<plan::DeviceType>& types) {
  r.check_keys(table, "sites",
               {"names", "devices", "device_order", "latency_ms", "bandwidth_gbps", "intra_latency_ms",
                "intra_bandwidth_gbps", "inter_latency_ms", "inter_bandwidth_gbps", "link", "device_type",
                "gpus_per_node", "node_latency_ms", "node_bandwidth_gbps", "node_shares_links", "nic_gbps",
                "uplink_gbps"});
  SiteLayout layout;
  layout.names = read_site_names(r, table);
  layout.devices = read_site_devices(r, table, layout.names.size());
  layout.site_of_device = assign_devices(r, table, layout.devices);
  const SiteLinks links = read_site_links(r, table, layout);

  // Unused diagonal entries stay empty; they are normalised away below.
  const size_t s = layout.names.size();
  std::vector<double> latency_s(s * s, 0.0);
  std::vector<double> bandwidth(s * s, kInf);
  for (size_t k = 0; k < s * s; ++k) {
    if (links.latency_ms[k]) latency_s[k] = seconds_from_ms(*links.latency_ms[k]);
    if (links.bandwidth_gbps[k]) bandwidth[k] = bytes_per_s_from_gbps(*links.bandwidth_gbps[k]);
  }
  plan::Network network = plan::network_from_sites(layout.site_of_device, layout.names, latency_s, bandwidth);
  normalise_diagonal(network);
  read_site_nodes(r, table, layout, network);
  // One type per site, then per device through the site each device is in.
  const std::vector<int> site_type = read_device_type_list(r, table, "sites.device_type", s, "site", types);
  if (!site_type.empty()) {
    network.device_types = types;
    for (int site : layout.site_of_device) network.type_of_device.push_back(site_type[site]);
  }
  // Shared links: each device's NIC by its site, each site's uplink.
  if (nics_unlimited(r, table, "sites")) network.shared.nics = plan::NicSource::unlimited;
  const std::vector<double> nic_gbps =
      network.shared.nics == plan::NicSource::unlimited ? std::vector<double>{}
                                                         : read_rates_gbps(r, table, "sites", "nic_gbps", s, "site");
  for (int site : nic_gbps.empty() ? std::vector<int>{} : layout.site_of_device) {
    network.shared.nic_bytes_per_s.push_back(bytes_per_s_from_gbps(nic_gbps[site]));
  }
  network.shared.site_uplink_bytes_per_s =
      uplinks_by_site(layout.names, read_rates_gbps(r, table, "sites", "uplink_gbps", s, "site"));
  return network;
}

}  // namespace geotrain::io::scenario_file
