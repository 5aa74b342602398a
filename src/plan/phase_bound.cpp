// The fluid bound (flow_sharing.hpp) of an exchange phase whose transfers
// are every ordered pair of some groups: the loads tallied pair by pair
// from the groups, with no transfer list. At 1,024 devices a direct sum's
// phase is a million transfers, and the layout search prices thousands.
#include <algorithm>
#include <limits>
#include <string>

#include "geotrain/plan/exchange_pattern.hpp"

namespace geotrain::plan {
namespace {

// As fluid_bound_s's: a resource's bytes and the smallest latency of the
// transfers crossing it (infinite: none does).
struct Load {
  double bytes = 0, latency = std::numeric_limits<double>::infinity();
  void add(double b, double l) { bytes += b, latency = std::min(latency, l); }
  double seconds(double capacity) const {
    return latency < std::numeric_limits<double>::infinity() ? bytes / capacity + latency : 0.0;
  }
};

// A site named by the groups' members, with its uplink (if it has one).
struct SiteLoad {
  const std::string* name;
  const double* capacity;  // null: no uplink given
  Load out, in;
};

bool disjoint(const Network& net, const ExchangePhase& phase) {
  std::vector<char> seen(static_cast<size_t>(net.device_count), 0);
  for (const AllPairs& group : phase.all_pairs) {
    for (int u : group.members) {
      if (seen[u]++) return false;
    }
  }
  return true;
}

class AllPairsBound {
 public:
  AllPairsBound(const Network& net, bool with_latency) : net_(net), with_latency_(with_latency) {}

  void add(const AllPairs& group) {
    const size_t d = group.members.size();
    const auto& nic = net_.shared.nic_bytes_per_s;
    site_.assign(d, -1);
    if (!net_.shared.site_uplink_bytes_per_s.empty()) {
      for (size_t i = 0; i < d; ++i) site_[i] = site_index(net_.site(group.members[i]));
    }
    in_.assign(d, Load{});
    for (size_t i = 0; i < d; ++i) {
      const int u = group.members[i];
      Load out;
      for (size_t j = 0; j < d; ++j) {
        if (j == i) continue;
        const int v = group.members[j];
        const double latency = net_.latency(u, v), l = with_latency_ ? latency : 0.0;
        any_bytes_ += group.bytes, slowest_latency_ = std::max(slowest_latency_, latency);
        end_ = std::max(end_, group.bytes / net_.bandwidth(u, v) + l);
        out.add(group.bytes, l), in_[j].add(group.bytes, l);
        if (site_[i] != site_[j]) {
          if (sites_[site_[i]].capacity) sites_[site_[i]].out.add(group.bytes, l);
          if (sites_[site_[j]].capacity) sites_[site_[j]].in.add(group.bytes, l);
        }
      }
      if (!nic.empty()) end_ = std::max(end_, out.seconds(nic[u]));
    }
    for (size_t j = 0; j < d && !nic.empty(); ++j) end_ = std::max(end_, in_[j].seconds(nic[group.members[j]]));
  }

  double seconds() const {
    if (any_bytes_ == 0) return with_latency_ ? slowest_latency_ : 0.0;
    double end = end_;
    for (const SiteLoad& site : sites_) {
      if (site.capacity) end = std::max({end, site.out.seconds(*site.capacity), site.in.seconds(*site.capacity)});
    }
    return end;
  }

 private:
  int site_index(const std::string& name) {
    for (size_t s = 0; s < sites_.size(); ++s) {
      if (sites_[s].name == &name || *sites_[s].name == name) return static_cast<int>(s);
    }
    const auto& uplinks = net_.shared.site_uplink_bytes_per_s;
    const auto it = uplinks.find(name);
    sites_.push_back({&name, it == uplinks.end() ? nullptr : &it->second, {}, {}});
    return static_cast<int>(sites_.size()) - 1;
  }

  const Network& net_;
  const bool with_latency_;
  double any_bytes_ = 0, slowest_latency_ = 0, end_ = 0;
  std::vector<SiteLoad> sites_;
  std::vector<int> site_;  // per member of the group being added: its index in sites_
  std::vector<Load> in_;   // per member of the group being added
};

}  // namespace

std::vector<Transfer> phase_transfers(const ExchangePhase& phase) {
  std::vector<Transfer> transfers = phase.transfers;
  for (const AllPairs& group : phase.all_pairs) {
    for (int u : group.members) {
      for (int v : group.members) {
        if (u != v) transfers.push_back({u, v, group.bytes});
      }
    }
  }
  return transfers;
}

double phase_bound_s(const Network& net, const ExchangePhase& phase, bool with_latency) {
  if (!phase.transfers.empty() || !disjoint(net, phase)) return fluid_bound_s(net, phase_transfers(phase), with_latency);
  AllPairsBound bound(net, with_latency);
  for (const AllPairs& group : phase.all_pairs) bound.add(group);
  return bound.seconds();
}

}  // namespace geotrain::plan
