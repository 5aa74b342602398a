// Shared by the parts of the scenario reader (internal to io):
// scenario.cpp (the whole file), scenario_network.cpp ([network] and the
// matrices' units), scenario_sites.cpp ([sites]), scenario_workload.cpp
// ([workload]) and scenario_writer.cpp (network_to_toml). The writer shares
// the units so that it can pick file numbers that convert back to exactly
// the stored doubles.
#pragma once
#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <toml++/toml.h>
#include <vector>

#include "geotrain/io/scenario.hpp"
#include "geotrain/plan/network.hpp"
#include "toml_reader.hpp"

namespace geotrain::io::scenario_file {

// Site-form inputs are expanded to two N*N matrices; this cap keeps a typo
// such as `devices = [1000000]` from allocating terabytes (16384 devices is
// 2 x 2 GiB already).
inline constexpr long long kMaxDevices = 16384;

inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline double seconds_from_ms(double ms) { return ms / 1000.0; }
inline double bytes_per_s_from_gbps(double gbps) { return gbps * plan::kBytesPerGbit; }

// The shared reader (toml_reader.hpp) plus the network's matrices and units.
class Reader : public TomlReader {
 public:
  using TomlReader::TomlReader;

  // A square matrix of numbers, row-major. Values are not range-checked here
  // because which entries matter (the diagonal or not) depends on the form.
  std::vector<double> square_matrix(const toml::node& node, const std::string& field, size_t* side) const;
  void check_latency_ms(double value, const std::string& field) const;
  void check_bandwidth_gbps(double value, const std::string& field) const;

 private:
  void check_square_shape(const toml::array& rows, const std::string& field) const;
};

// A device's link to itself is never used; 0 s and +inf bytes/s make that
// explicit (transfer_s(u, u, b) == 0) and no code can divide by a zero.
void normalise_diagonal(plan::Network& network);

// `key` of [section] (nic_gbps, uplink_gbps): one number for all `count`
// devices or sites, or one per each (bandwidths as in the matrices); empty
// when the key is absent.
std::vector<double> read_rates_gbps(const Reader& r, const toml::table& table, const std::string& section,
                                    const char* key, size_t count, const char* each);
// nic_gbps = "unlimited" in [section]: the pair-only model, asked for (any
// other text is an error); absent or numbers: false.
bool nics_unlimited(const Reader& r, const toml::table& table, const std::string& section);
// Site name -> uplink in bytes/s, from per-site rates in the order of `names`.
std::map<std::string, double> uplinks_by_site(const std::vector<std::string>& names, const std::vector<double>& gbps);

// [network] or [sites], whichever the file has (exactly one).
plan::Network read_network(const Reader& r, const toml::table& root);
// [sites]: the site-based form.
plan::Network read_site_network(const Reader& r, const toml::table& table,
                                const std::vector<plan::DeviceType>& types);
// [workload] with the command line's overrides, for a network of `devices`;
// records in `scenario` whether the file had one and whether degrees were given.
plan::Workload read_workload(const Reader& r, const toml::table& root, const WorkloadOverrides& overrides,
                             int devices, Scenario& scenario);

}  // namespace geotrain::io::scenario_file
