// The world-wide scenario's eight cities (its sites 0, 8, 16, ...), with
// `devices` devices spread evenly over them: the network the planner
// benchmarks scale to thousands of devices. Links inside a city take the
// scenario's link between two devices of that city.
#pragma once

#include <string>
#include <vector>

#include "geotrain/io/scenario.hpp"
#include "geotrain/plan/network.hpp"

namespace geotrain::bench {

inline plan::Network eight_city_world(const io::Scenario& world, int devices) {
  const int cities = 8, per_city = devices / cities;
  std::vector<int> site_of(devices);
  for (int i = 0; i < devices; ++i) site_of[i] = i / per_city;
  std::vector<std::string> names;
  std::vector<double> latency(cities * cities), bandwidth(cities * cities);
  for (int a = 0; a < cities; ++a) {
    names.push_back(world.network.site(a * 8));
    for (int b = 0; b < cities; ++b) {
      latency[a * cities + b] = world.network.latency(a * 8, b * 8 + (a == b));
      bandwidth[a * cities + b] = world.network.bandwidth(a * 8, b * 8 + (a == b));
    }
  }
  return plan::network_from_sites(site_of, names, latency, bandwidth);
}

}  // namespace geotrain::bench
