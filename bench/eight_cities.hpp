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

constexpr int kCities = 8;

// The city (0-7) of device `device` of `devices`: consecutive devices share one.
inline int city_of_device(int device, int devices) { return device / (devices / kCities); }

inline plan::Network eight_city_world(const io::Scenario& world, int devices) {
  std::vector<int> site_of(devices);
  for (int i = 0; i < devices; ++i) site_of[i] = city_of_device(i, devices);
  std::vector<std::string> names;
  std::vector<double> latency(kCities * kCities), bandwidth(kCities * kCities);
  for (int a = 0; a < kCities; ++a) {
    names.push_back(world.network.site(a * 8));
    for (int b = 0; b < kCities; ++b) {
      latency[a * kCities + b] = world.network.latency(a * 8, b * 8 + (a == b));
      bandwidth[a * kCities + b] = world.network.bandwidth(a * 8, b * 8 + (a == b));
    }
  }
  return plan::network_from_sites(site_of, names, latency, bandwidth);
}

}  // namespace geotrain::bench
