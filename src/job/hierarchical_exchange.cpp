#include "geotrain/job/hierarchical_exchange.hpp"

#include <algorithm>
#include <climits>
#include <string>

#include "geotrain/mpi/mpi_check.hpp"

namespace geotrain::runtime {
namespace {

// On the site's communicator, apart from the tags the lane's and the whole
// group's exchanges use on theirs.
constexpr int kSiteGatherTag = 1, kSiteSpreadTag = 3;

int float_count(std::size_t count, const ExchangeGroup& group) {
  if (count > static_cast<std::size_t>(INT_MAX)) abort_all(group.what + ": over 2^31 elements in one message");
  return static_cast<int>(count);
}

void post_floats(bool send, float* data, std::size_t count, int peer, int tag, const ExchangeGroup& group,
          std::vector<MPI_Request>& requests) {
  requests.emplace_back();
  const int n = float_count(count, group);
  if (send) {
    GT_MPI_CHECK(MPI_Isend(data, n, MPI_FLOAT, peer, tag, group.comm, &requests.back()));
  } else {
    GT_MPI_CHECK(MPI_Irecv(data, n, MPI_FLOAT, peer, tag, group.comm, &requests.back()));
  }
}

}  // namespace

SiteLanes site_lanes(const Topology& t, double deadline_s) {
  if (t.site_ranks.empty()) abort_all("site_lanes: the topology was made without sites");
  const std::string group = "the data-parallel group of stage " + std::to_string(t.stage);
  SiteLanes l;
  l.whole = exchange_group(t.dp_comm.get(), t.dp_ranks, deadline_s, "summing over " + group, t.rank);
  l.whole.site_of_member = t.site_of_replica;
  l.site = exchange_group(t.site_comm.get(), t.site_ranks, deadline_s, "summing inside this site, over " + group, t.rank);
  l.lane = exchange_group(t.lane_comm.get(), t.lane_ranks, deadline_s,
                          "summing a stripe across sites, over " + group, t.rank);
  l.lanes = t.lanes;
  l.place = t.site_place;
  return l;
}

// Only on an exception path: the requests must not outlive their buffers.
HierarchicalInFlight::~HierarchicalInFlight() { cancel_pending(requests_); }

std::size_t HierarchicalInFlight::stripe_begin(int stripe) const {
  return count_ * static_cast<std::size_t>(stripe) / static_cast<std::size_t>(lanes_->lanes);
}

std::size_t HierarchicalInFlight::stripe_count(int stripe) const { return stripe_begin(stripe + 1) - stripe_begin(stripe); }

void HierarchicalInFlight::start(const SiteLanes& lanes, int tag_base, float* data, std::size_t count, double* values,
                                 int value_count, const WireCodec* codec, EncodedSumState* state) {
  if (phase_ != Phase::done) abort_all(lanes.whole.what + ": an exchange started twice");
  lanes_ = &lanes, tag_base_ = tag_base, data_ = data, count_ = count, codec_ = codec, state_ = state;
  GT_MPI_CHECK(MPI_Comm_size(lanes.site.comm, &site_size_));
  values_.start(lanes.whole, tag_base, nullptr, 0, values, value_count, nullptr, nullptr);
  if (count_ == 0) return;
  phase_ = Phase::gather;
  post_gather();
}

// Every member sends stripe j to the site's member j; an owner receives its
// stripe from all the others.
void HierarchicalInFlight::post_gather() {
  const SiteLanes& l = *lanes_;
  const int tag = tag_base_ + kSiteGatherTag;
  for (int stripe = 0; stripe < l.lanes; ++stripe) {
    if (stripe != l.place) post_floats(true, data_ + stripe_begin(stripe), stripe_count(stripe), stripe, tag, l.site, requests_);
  }
  if (l.place >= l.lanes) return;
  const std::size_t own = stripe_count(l.place);
  copies_.resize(own * static_cast<std::size_t>(site_size_));
  for (int member = 0; member < site_size_; ++member) {
    if (member != l.place) post_floats(false, copies_.data() + own * static_cast<std::size_t>(member), own, member, tag, l.site, requests_);
  }
}

// The owner's stripe: its site's copies added in rank order.
void HierarchicalInFlight::add_site_copies() {
  const SiteLanes& l = *lanes_;
  const std::size_t begin = stripe_begin(l.place), own = stripe_count(l.place);
  std::copy(data_ + begin, data_ + begin + own, copies_.data() + own * static_cast<std::size_t>(l.place));
  for (std::size_t i = 0; i < own; ++i) {
    float partial = copies_[i];
    for (int member = 1; member < site_size_; ++member) partial += copies_[own * static_cast<std::size_t>(member) + i];
    data_[begin + i] = partial;
  }
}

// An owner sends its summed stripe to the rest of its site; every member
// receives the stripes it does not own.
void HierarchicalInFlight::post_spread() {
  const SiteLanes& l = *lanes_;
  const int tag = tag_base_ + kSiteSpreadTag;
  for (int stripe = 0; stripe < l.lanes; ++stripe) {
    if (stripe != l.place) post_floats(false, data_ + stripe_begin(stripe), stripe_count(stripe), stripe, tag, l.site, requests_);
  }
  if (l.place >= l.lanes) return;
  const std::size_t begin = stripe_begin(l.place), own = stripe_count(l.place);
  for (int member = 0; member < site_size_; ++member) {
    if (member != l.place) post_floats(true, data_ + begin, own, member, tag, l.site, requests_);
  }
}

// The current phase's requests (and the lane's sum) are complete.
void HierarchicalInFlight::advance() {
  const SiteLanes& l = *lanes_;
  switch (phase_) {
    case Phase::gather:
      phase_ = Phase::across;
      if (l.place < l.lanes) {
        add_site_copies();
        const std::size_t begin = stripe_begin(l.place);
        across_.start(l.lane, tag_base_, data_ + begin, stripe_count(l.place), nullptr, 0, codec_, state_);
      }
      return;
    case Phase::across:
      phase_ = Phase::spread;
      post_spread();
      return;
    case Phase::spread:
    case Phase::done:
      phase_ = Phase::done;
      return;
  }
}

bool HierarchicalInFlight::progress() {
  while (phase_ != Phase::done) {
    if (!requests_complete(requests_)) return false;
    if (phase_ == Phase::across && !across_.progress()) return false;
    advance();
  }
  return values_.progress();
}

void HierarchicalInFlight::finish() {
  while (phase_ != Phase::done) {
    if (!requests_.empty()) {
      wait_all_or_abort(requests_, lanes_->site.deadline_s, lanes_->site.what, -1, 2e-4, lanes_->site.world_ranks);
    }
    requests_.clear();
    if (phase_ == Phase::across) across_.finish();
    advance();
  }
  values_.finish();
}

void exchange_sum_hierarchical(const SiteLanes& lanes, float* data, std::size_t count, double* values, int value_count,
                               const WireCodec* codec, EncodedSumState* state) {
  HierarchicalInFlight exchange;
  exchange.start(lanes, 0, data, count, values, value_count, codec, state);
  exchange.finish();
}

}  // namespace geotrain::runtime
