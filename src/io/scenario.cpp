// Scenario files (format: inputs/scenarios/README.md). Everything a user can
// get wrong is reported as one InputError line that names the file and the
// field: "<path>: <field>: <what is wrong> (<hint>)".
#include "geotrain/io/scenario.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <locale>
#include <sstream>
#include <stdexcept>
#include <toml++/toml.h>
#include <utility>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "model_table.hpp"
#include "scenario_devices.hpp"
#include "toml_reader.hpp"

namespace geotrain::io {
namespace {

// Site-form inputs are expanded to two N*N matrices; this cap keeps a typo
// such as `devices = [1000000]` from allocating terabytes (16384 devices is
// 2 x 2 GiB already).
constexpr long long kMaxDevices = 16384;

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------
// Units. The loader and the writer share these, so that the writer can pick
// file numbers that convert back to exactly the stored doubles.

double seconds_from_ms(double ms) { return ms / 1000.0; }
double bytes_per_s_from_gbps(double gbps) { return gbps * plan::kBytesPerGbit; }

// ---------------------------------------------------------------------------
// The shared reader (toml_reader.hpp) plus the network's matrices and units.

class Reader : public TomlReader {
 public:
  using TomlReader::TomlReader;

  // A square matrix of numbers, row-major. Values are not range-checked here
  // because which entries matter (the diagonal or not) depends on the form.
  std::vector<double> square_matrix(const toml::node& node, const std::string& field,
                                    size_t* side) const {
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

  void check_latency_ms(double value, const std::string& field) const {
    if (!(std::isfinite(value) && value >= 0.0)) {
      fail(field, "must be a finite number >= 0, got " + shortest(value), "latency in milliseconds");
    }
  }

  void check_bandwidth_gbps(double value, const std::string& field) const {
    if (!(std::isfinite(value) && value > 0.0)) {
      fail(field, "must be a finite number > 0, got " + shortest(value), "bandwidth in Gbit/s");
    }
    // Stored in bytes/s: past ~1.4e300 Gbit/s that is +inf, a free link.
    if (!std::isfinite(bytes_per_s_from_gbps(value))) {
      fail(field, "is too large, got " + shortest(value), "bandwidth in Gbit/s");
    }
  }

 private:
  // Every row must be an array of exactly n entries. A uniformly wide but
  // non-square matrix gets its own message; a ragged one names the row.
  void check_square_shape(const toml::array& rows, const std::string& field) const {
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

  std::string path_;
};

// A device's link to itself is never used; 0 s and +inf bytes/s make that
// explicit (transfer_s(u, u, b) == 0) and no code can divide by a zero.
void normalise_diagonal(plan::Network& network) {
  const int n = network.device_count;
  for (int u = 0; u < n; ++u) {
    network.latency_s[u * n + u] = 0.0;
    network.bandwidth_bytes_per_s[u * n + u] = kInf;
  }
}

// ---------------------------------------------------------------------------
// [network]: the full-matrix form.

plan::Network read_full_matrix_network(const Reader& r, const toml::table& table,
                                       const std::vector<plan::DeviceType>& types) {
  r.check_keys(table, "network", {"latency_ms", "bandwidth_gbps", "sites", "device_type"});
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
  return network;
}

// ---------------------------------------------------------------------------
// [sites]: the site-based form.

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

plan::Network read_site_network(const Reader& r, const toml::table& table,
                                const std::vector<plan::DeviceType>& types) {
  r.check_keys(table, "sites",
               {"names", "devices", "device_order", "latency_ms", "bandwidth_gbps", "intra_latency_ms",
                "intra_bandwidth_gbps", "inter_latency_ms", "inter_bandwidth_gbps", "link", "device_type",
                "gpus_per_node", "node_latency_ms", "node_bandwidth_gbps", "node_shares_links"});
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
  return network;
}

plan::Network read_network(const Reader& r, const toml::table& root) {
  const toml::table* full = r.optional_table(root, "network", "network");
  const toml::table* sites = r.optional_table(root, "sites", "sites");
  if (full != nullptr && sites != nullptr) {
    r.fail("sites", "cannot be combined with [network]", "describe the network either as [network] matrices or as [sites]");
  }
  const std::vector<plan::DeviceType> types = read_device_types(r, root);
  if (full != nullptr) return read_full_matrix_network(r, *full, types);
  if (sites != nullptr) return read_site_network(r, *sites, types);
  r.fail("network", "missing required field", "add a [network] table with matrices or a [sites] table");
}

// ---------------------------------------------------------------------------
// [workload]

struct FileWorkload {
  bool present = false;
  std::optional<int> pipeline_stages;
  std::optional<int> data_parallel;
  std::string preset = "model";
  plan::TrainingShape model;
};

// Overrides of the default GPT3-XL shape and its traffic. Only meaningful
// for preset "model": the dtfm-original constants do not depend on a model.
bool read_training_shape(const Reader& r, const toml::table& table, plan::TrainingShape& model) {
  bool any = read_model_shape(r, table, "workload", "model_name", false, model);
  auto integer = [&](const char* key, int& target) {
    if (auto value = r.optional_positive_int(table, key, field_key("workload", key))) {
      target = *value;
      any = true;
    }
  };
  integer("activation_bytes", model.activation_bytes);
  integer("gradient_bytes", model.gradient_bytes);
  if (auto tokens = r.optional_number(table, "tokens_per_step", "workload.tokens_per_step")) {
    if (!(std::isfinite(*tokens) && *tokens > 0.0)) {
      r.fail("workload.tokens_per_step", "must be a finite number > 0, got " + shortest(*tokens));
    }
    model.tokens_per_step = *tokens;
    any = true;
  }
  return any;
}

FileWorkload read_file_workload(const Reader& r, const toml::table& root) {
  FileWorkload file;
  const toml::table* table = r.optional_table(root, "workload", "workload");
  if (table == nullptr) return file;
  file.present = true;
  r.check_keys(*table, "workload",
               {"pp", "dp", "preset", "layers", "hidden", "heads", "sequence_length", "vocabulary",
                "tokens_per_step", "activation_bytes", "gradient_bytes", "model_name"});
  file.pipeline_stages = r.optional_positive_int(*table, "pp", "workload.pp");
  file.data_parallel = r.optional_positive_int(*table, "dp", "workload.dp");
  file.preset = r.optional_string(*table, "preset", "workload.preset").value_or("model");
  if (file.preset != "model" && file.preset != "dtfm-original") {
    r.fail("workload.preset", "must be \"model\" or \"dtfm-original\", got \"" + file.preset + "\"");
  }
  const bool shape_given = read_training_shape(r, *table, file.model);
  if (shape_given && file.preset != "model") {
    r.fail("workload.preset", "model fields (layers, hidden, ...) are only allowed with preset = \"model\"",
           "the dtfm-original constants do not depend on a model");
  }
  return file;
}

struct Degrees {
  int pipeline_stages = 0;
  int data_parallel = 0;
  bool given = true;  // false: neither known and the caller chooses (degrees_optional)
};

// Precedence: command line, then file, then derived from the device count.
Degrees resolve_degrees(const Reader& r, const FileWorkload& file, const WorkloadOverrides& overrides,
                        int devices) {
  if (overrides.network_only) return {1, devices};
  if (overrides.pipeline_stages && *overrides.pipeline_stages < 1) {
    r.fail("workload.pp", "--pp must be >= 1, got " + std::to_string(*overrides.pipeline_stages));
  }
  if (overrides.data_parallel && *overrides.data_parallel < 1) {
    r.fail("workload.dp", "--dp must be >= 1, got " + std::to_string(*overrides.data_parallel));
  }
  const std::optional<int> pp = overrides.pipeline_stages ? overrides.pipeline_stages : file.pipeline_stages;
  const std::optional<int> dp = overrides.data_parallel ? overrides.data_parallel : file.data_parallel;
  const std::string pp_origin = overrides.pipeline_stages ? "--pp" : "workload.pp";
  const std::string dp_origin = overrides.data_parallel ? "--dp" : "workload.dp";
  const std::string count = std::to_string(devices) + " devices";

  if (!pp && !dp) {
    if (overrides.degrees_optional) return {1, devices, false};
    if (!file.present) {
      r.fail("workload.pp", "no [workload] table and no --pp/--dp given", "the network has " + count);
    }
    r.fail("workload.pp", "missing required field", "set pp and dp in [workload] or give --pp/--dp");
  }
  Degrees degrees;
  if (pp && dp) {
    degrees = {*pp, *dp};
    const long long product = static_cast<long long>(*pp) * *dp;
    if (product != devices) {
      r.fail("workload.pp", "pp*dp = " + std::to_string(product) + " but the network has " + count,
             "pp from " + pp_origin + ", dp from " + dp_origin);
    }
  } else if (pp) {
    if (devices % *pp != 0) {
      r.fail("workload.dp", "cannot derive dp: the network has " + count + ", not divisible by pp = " +
             std::to_string(*pp), "pp from " + pp_origin);
    }
    degrees = {*pp, devices / *pp};
  } else {
    if (devices % *dp != 0) {
      r.fail("workload.pp", "cannot derive pp: the network has " + count + ", not divisible by dp = " +
             std::to_string(*dp), "dp from " + dp_origin);
    }
    degrees = {devices / *dp, *dp};
  }
  return degrees;
}

plan::Workload read_workload(const Reader& r, const toml::table& root, const WorkloadOverrides& overrides,
                             int devices, Scenario& scenario) {
  const FileWorkload file = read_file_workload(r, root);
  scenario.workload_from_file = file.present;
  const Degrees degrees = resolve_degrees(r, file, overrides, devices);
  scenario.degrees_given = degrees.given;
  if (file.preset == "dtfm-original") {
    return plan::dtfm_original_workload(degrees.pipeline_stages, degrees.data_parallel);
  }
  const plan::Workload workload = plan::workload_from_model(file.model, degrees.pipeline_stages, degrees.data_parallel);
  // Only an extreme tokens_per_step gets here (the integers cannot overflow
  // a double): the activation size would be +inf or 0 and every plan equal.
  if (!(std::isfinite(workload.c_pp_bytes) && workload.c_pp_bytes > 0.0 && std::isfinite(workload.c_dp_bytes))) {
    r.fail("workload.tokens_per_step", "gives an activation size of " + shortest(workload.c_pp_bytes) + " bytes",
           "tokens_per_step / dp * hidden * activation_bytes must be a finite number > 0");
  }
  return workload;
}

// ---------------------------------------------------------------------------
// Whole file.

std::string file_stem(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

// ---------------------------------------------------------------------------
// Writing.

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

std::string toml_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\u%04x", c);
      out += escape;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
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

}  // namespace

namespace {

Scenario parse_toml_scenario(const Reader& r, const toml::table& root, const WorkloadOverrides& overrides) {
  const std::string& path = r.path();
  r.check_keys(root, "", {"scenario", "device_types", "network", "sites", "workload"});

  Scenario scenario;
  scenario.path = path;
  scenario.name = file_stem(path);
  if (const toml::table* info = r.optional_table(root, "scenario", "scenario")) {
    r.check_keys(*info, "scenario", {"name", "description", "source"});
    scenario.name = r.optional_string(*info, "name", "scenario.name").value_or(scenario.name);
    scenario.description = r.optional_string(*info, "description", "scenario.description").value_or("");
    scenario.source = r.optional_string(*info, "source", "scenario.source").value_or("");
  }
  scenario.network = read_network(r, root);
  scenario.workload =
      read_workload(r, root, overrides, scenario.network.device_count, scenario);

  return scenario;
}

}  // namespace

Scenario parse_scenario(std::string_view toml_text, const std::string& path, const WorkloadOverrides& overrides) {
  const Reader r(path);
  return parse_toml_scenario(r, r.parse(toml_text), overrides);
}

Scenario load_scenario(const std::string& path, const WorkloadOverrides& overrides) {
  const Reader r(path);
  return parse_toml_scenario(r, r.parse_file(), overrides);
}

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
    const double stored = network.bandwidth(u, v);
    return file_value_for(stored, stored / plan::kBytesPerGbit, bytes_per_s_from_gbps);
  });
  if (!network.site_of_device.empty()) {
    out << "sites = [";
    for (size_t i = 0; i < network.site_of_device.size(); ++i) {
      out << (i == 0 ? "" : (i % 8 == 0 ? ",\n  " : ", ")) << toml_string(network.site_of_device[i]);
    }
    out << "]\n";
  }
  write_device_types(out, network);
  return out.str();
}

}  // namespace geotrain::io
