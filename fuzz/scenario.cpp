// Scenario files (io/scenario.hpp): parse_scenario on the input as TOML
// text, once for a network alone and once with its workload. Invariants:
//  - what the workload-free parse rejects, the full parse rejects too, and
//    both give the same network;
//  - an accepted network is N x N, diagonal 0 s / +inf, every other latency
//    finite and >= 0, every other bandwidth finite and > 0, one site per
//    device or none; an accepted workload has pp * dp = N and finite,
//    positive communication sizes;
//  - network_to_toml writes it back to text that loads as identical doubles
//    (the writer's documented promise).
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <toml++/toml.h>

#include "fuzz_support.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/io/scenario.hpp"

namespace {

using geotrain::io::Scenario;
using geotrain::io::WorkloadOverrides;
using geotrain::plan::Network;

// The format allows 16384 devices in the site form (2 x 2 GiB of matrices):
// legitimate, but past the fuzzer's 2 GiB memory limit and seconds per
// input. Such inputs are skipped; unit tests cover the limit itself.
constexpr long long kDeviceBudget = 1024;
// network_to_toml's text grows as N^2; the round trip is checked below this.
constexpr int kRoundTripDevices = 64;

bool over_device_budget(std::string_view text) {
  if (text.find("devices") == std::string_view::npos) return false;  // only the site form multiplies
  toml::table root;
  try {
    root = toml::parse(text);
  } catch (const toml::parse_error&) {
    return false;
  }
  const toml::array* devices = root["sites"]["devices"].as_array();
  if (devices == nullptr) return false;
  long long total = 0;
  for (const toml::node& count : *devices) {
    if (const auto* integer = count.as_integer(); integer != nullptr && integer->get() > 0) {
      total += std::min<long long>(integer->get(), kDeviceBudget + 1);
    }
  }
  return total > kDeviceBudget;
}

std::optional<Scenario> try_parse(std::string_view text, const WorkloadOverrides& overrides) {
  try {
    return geotrain::io::parse_scenario(text, "fuzz.toml", overrides);
  } catch (const geotrain::InputError&) {
    return std::nullopt;
  }
}

void check_network(const Network& network) {
  const int n = network.device_count;
  FUZZ_CHECK(n >= 1, std::to_string(n));
  const std::size_t cells = static_cast<std::size_t>(n) * n;
  FUZZ_CHECK(network.latency_s.size() == cells && network.bandwidth_bytes_per_s.size() == cells, "matrix size");
  FUZZ_CHECK(network.site_of_device.empty() || network.site_of_device.size() == static_cast<std::size_t>(n),
             "sites");
  for (int u = 0; u < n; ++u) {
    for (int v = 0; v < n; ++v) {
      const std::string cell = "[" + std::to_string(u) + "][" + std::to_string(v) + "]";
      const double latency = network.latency(u, v), bandwidth = network.bandwidth(u, v);
      if (u == v) {
        FUZZ_CHECK(latency == 0 && bandwidth == INFINITY, "diagonal" + cell);
      } else {
        FUZZ_CHECK(std::isfinite(latency) && latency >= 0, "latency" + cell + " = " + std::to_string(latency));
        FUZZ_CHECK(std::isfinite(bandwidth) && bandwidth > 0, "bandwidth" + cell + " = " + std::to_string(bandwidth));
      }
    }
  }
}

bool same_network(const Network& a, const Network& b) {
  return a.device_count == b.device_count && a.latency_s == b.latency_s &&
         a.bandwidth_bytes_per_s == b.bandwidth_bytes_per_s && a.site_of_device == b.site_of_device;
}

void check_workload(const Scenario& scenario) {
  const auto& w = scenario.workload;
  FUZZ_CHECK(w.pipeline_stages >= 1 && w.data_parallel >= 1, "degrees");
  FUZZ_CHECK(static_cast<long long>(w.pipeline_stages) * w.data_parallel == scenario.network.device_count,
             "pp * dp = " + std::to_string(w.pipeline_stages) + " * " + std::to_string(w.data_parallel));
  FUZZ_CHECK(std::isfinite(w.c_pp_bytes) && w.c_pp_bytes > 0, "c_pp_bytes = " + std::to_string(w.c_pp_bytes));
  FUZZ_CHECK(std::isfinite(w.c_dp_bytes) && w.c_dp_bytes > 0, "c_dp_bytes = " + std::to_string(w.c_dp_bytes));
}

void check_round_trip(const Network& network) {
  if (network.device_count > kRoundTripDevices) return;
  const std::string text = geotrain::io::network_to_toml(network);
  WorkloadOverrides network_only;
  network_only.network_only = true;
  const std::optional<Scenario> again = try_parse(text, network_only);
  FUZZ_CHECK(again.has_value(), "network_to_toml wrote text that does not load:\n" + text);
  FUZZ_CHECK(same_network(network, again->network), "network_to_toml changed the network:\n" + text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (over_device_budget(text)) return 0;
  WorkloadOverrides network_only;
  network_only.network_only = true;
  const std::optional<Scenario> network = try_parse(text, network_only);
  const std::optional<Scenario> full = try_parse(text, {});
  if (full) {
    FUZZ_CHECK(network.has_value(), "accepted with its workload, rejected as a network alone");
    FUZZ_CHECK(same_network(full->network, network->network), "the workload changed the network");
    check_workload(*full);
  }
  if (network) {
    check_network(network->network);
    check_round_trip(network->network);
  }
  return 0;
}
