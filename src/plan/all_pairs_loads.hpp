// The resources an all_pairs phase crosses (exchange_pattern.hpp), tallied
// pair by pair without a transfer list: what both the fluid bound of one
// phase (phase_bound.cpp) and a group's cost lines (exchange_cost.cpp) read.
#pragma once
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "geotrain/plan/exchange_pattern.hpp"

namespace geotrain::plan::all_pairs {

// A resource's bytes and the smallest latency of the transfers through it
// (infinite: none crosses it).
struct Load {
  double bytes = 0, latency = std::numeric_limits<double>::infinity();
  void add(double b, double l) { bytes += b, latency = std::min(latency, l); }
  bool crossed() const { return latency < std::numeric_limits<double>::infinity(); }
};

// Whether the phase is all_pairs groups alone with no device in two (their
// pairs then never repeat, so each pair link carries one transfer).
inline bool disjoint(const Network& net, const ExchangePhase& phase) {
  if (!phase.transfers.empty()) return false;
  std::vector<char> seen(static_cast<size_t>(net.device_count), 0);
  for (const AllPairs& group : phase.all_pairs) {
    for (int u : group.members) {
      if (seen[u]++) return false;
    }
  }
  return true;
}

// visit(load, capacity) for every resource a disjoint phase crosses: each
// pair link, each NIC side, each site uplink side (in the order of the
// transfers written out, so the sums are the same bits).
template <class Visit>
void for_each_resource(const Network& net, const ExchangePhase& phase, Visit&& visit) {
  const auto& nic = net.shared.nic_bytes_per_s;
  const auto& uplinks = net.shared.site_uplink_bytes_per_s;
  struct Site {
    const std::string* name;
    const double* capacity;  // null: no uplink given
    Load out, in;
  };
  std::vector<Site> sites;  // in order of first member
  auto site_index = [&](int device) {
    const std::string& name = net.site(device);
    for (size_t s = 0; s < sites.size(); ++s) {
      if (*sites[s].name == name) return static_cast<int>(s);
    }
    const auto it = uplinks.find(name);
    sites.push_back({&name, it == uplinks.end() ? nullptr : &it->second, {}, {}});
    return static_cast<int>(sites.size()) - 1;
  };
  for (const AllPairs& group : phase.all_pairs) {
    const size_t d = group.members.size();
    std::vector<int> site(d, -1);
    if (!uplinks.empty()) {
      for (size_t i = 0; i < d; ++i) site[i] = site_index(group.members[i]);
    }
    std::vector<Load> in(d);
    for (size_t i = 0; i < d; ++i) {
      const int u = group.members[i];
      Load out;
      for (size_t j = 0; j < d; ++j) {
        if (j == i) continue;
        const int v = group.members[j];
        const double latency = net.latency(u, v);
        Load pair;
        pair.add(group.bytes, latency);
        visit(pair, net.bandwidth(u, v));
        out.add(group.bytes, latency), in[j].add(group.bytes, latency);
        if (site[i] != site[j]) {
          if (sites[site[i]].capacity) sites[site[i]].out.add(group.bytes, latency);
          if (sites[site[j]].capacity) sites[site[j]].in.add(group.bytes, latency);
        }
      }
      if (!nic.empty()) visit(out, nic[u]);
    }
    for (size_t j = 0; j < d && !nic.empty(); ++j) visit(in[j], nic[group.members[j]]);
  }
  for (const Site& s : sites) {
    for (const Load* load : {&s.out, &s.in}) {
      if (s.capacity && load->crossed()) visit(*load, *s.capacity);
    }
  }
}

}  // namespace geotrain::plan::all_pairs
