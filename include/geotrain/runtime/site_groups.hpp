// Members of a group (the job's ranks, or one stage's replicas) grouped by
// the site each is in: what the per-site communicators and the per-site
// checkpoint shards are built from, numbered the same way everywhere.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace geotrain::runtime {

struct SiteGroups {
  std::vector<std::string> names;  // the sites, in the order of their first member
  std::vector<int> first_member;   // per site: its lowest member
  std::vector<int> site_of_member; // per member: the index of its site in `names`

  // The members in the same site as `member`, in order.
  std::vector<int> members_with(int member) const {
    std::vector<int> same;
    for (std::size_t m = 0; m < site_of_member.size(); ++m) {
      if (site_of_member[m] == site_of_member[static_cast<std::size_t>(member)]) same.push_back(static_cast<int>(m));
    }
    return same;
  }
};

inline SiteGroups group_by_site(const std::vector<std::string>& site_of_member) {
  SiteGroups g;
  for (std::size_t m = 0; m < site_of_member.size(); ++m) {
    const auto site = static_cast<std::size_t>(std::find(g.names.begin(), g.names.end(), site_of_member[m]) - g.names.begin());
    if (site == g.names.size()) {
      g.names.push_back(site_of_member[m]);
      g.first_member.push_back(static_cast<int>(m));
    }
    g.site_of_member.push_back(static_cast<int>(site));
  }
  return g;
}

}  // namespace geotrain::runtime
