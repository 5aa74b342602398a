// The data-parallel sum in two levels, for groups spread over sites
// (network.dp_exchange = "hierarchical"). The replicas of a site sum inside
// it first: each of its first `lanes` members owns one stripe of the buffer
// and gathers that stripe from the others. The owners of a stripe, one per
// site, sum it across sites (an ExchangeInFlight over their lane: fp32, or
// encoded with the wire's codec, so that only the traffic between sites is
// lossy). Each owner then spreads its stripe back inside its site. A site
// sends the buffer across sites once, striped over its `lanes` members,
// where the flat exchange sends one buffer per replica.
//
// fp32: the same bits as exchange_sum over the whole group, which adds in
// the same order (ExchangeGroup::site_of_member). The doubles go straight to
// every member, added in rank order as exchange_sum does.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "geotrain/job/mpi_exchange.hpp"
#include "geotrain/mpi/mpi_plan.hpp"

namespace geotrain::runtime {

// One member's view of its group's sites (mpi_plan.hpp's Topology: site_comm, lane_comm).
struct SiteLanes {
  ExchangeGroup whole;  // the data-parallel group, site_of_member set
  ExchangeGroup site;   // this member's site, by rank
  ExchangeGroup lane;   // the owners of this member's stripe, by site (comm null: it owns none)
  int lanes = 1;        // stripes: the members per site where all sites have as many, else 1
  int place = 0;        // this member's rank in `site`
};

// This rank's, from a topology made with sites (make_topology's
// site_of_rank).
SiteLanes site_lanes(const Topology& topology, double deadline_s);

// As ExchangeInFlight: start() posts, progress() advances without blocking,
// finish() waits with the deadline; tag bases as there.
class HierarchicalInFlight {
 public:
  HierarchicalInFlight() = default;
  HierarchicalInFlight(const HierarchicalInFlight&) = delete;
  HierarchicalInFlight& operator=(const HierarchicalInFlight&) = delete;
  ~HierarchicalInFlight();
  void start(const SiteLanes& lanes, int tag_base, float* data, std::size_t count, double* values, int value_count,
             const WireCodec* codec, EncodedSumState* state);
  bool progress();
  void finish();

 private:
  enum class Phase { done, gather, across, spread };
  std::size_t stripe_begin(int stripe) const;
  std::size_t stripe_count(int stripe) const;
  void post_gather();
  void add_site_copies();
  void post_spread();
  void advance();

  const SiteLanes* lanes_ = nullptr;
  int tag_base_ = 0, site_size_ = 1;
  float* data_ = nullptr;
  std::size_t count_ = 0;
  const WireCodec* codec_ = nullptr;
  EncodedSumState* state_ = nullptr;
  Phase phase_ = Phase::done;
  std::vector<MPI_Request> requests_;  // this phase's, inside the site
  std::vector<float> copies_;          // an owner's stripe from every member of its site, by rank
  ExchangeInFlight across_;            // an owner's stripe across sites
  ExchangeInFlight values_;            // the doubles, over the whole group
};

void exchange_sum_hierarchical(const SiteLanes& lanes, float* data, std::size_t count, double* values = nullptr,
                               int value_count = 0, const WireCodec* codec = nullptr, EncodedSumState* state = nullptr);

}  // namespace geotrain::runtime
