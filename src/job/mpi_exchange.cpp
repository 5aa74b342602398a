#include "geotrain/job/mpi_exchange.hpp"

#include <algorithm>
#include <climits>
#include <stdexcept>

#include "geotrain/mpi/mpi_check.hpp"

namespace geotrain::runtime {
namespace {

// The group's communicators carry no other point-to-point traffic. Tags are
// these plus the exchange's tag base, so that sums in flight together (the
// buckets of one step) never take each other's messages.
constexpr int kShardTag = 1, kValuesTag = 2, kGatherTag = 3, kPairTag = 4, kEncodedTag = 5;

int checked_count(std::size_t count, const std::string& what) {
  if (count > static_cast<std::size_t>(INT_MAX)) abort_all(what + ": over 2^31 elements in one message");
  return static_cast<int>(count);
}

// A two-member swap: the other member's `count` floats into `received`,
// this member's out of `sent`.
void post_swap(const ExchangeGroup& group, int self, const float* sent, float* received, std::size_t count,
               MPI_Request* receive, MPI_Request* send, int tag) {
  const int n = checked_count(count, group.what);
  GT_MPI_CHECK(MPI_Irecv(received, n, MPI_FLOAT, 1 - self, tag, group.comm, receive));
  GT_MPI_CHECK(MPI_Isend(sent, n, MPI_FLOAT, 1 - self, tag, group.comm, send));
}

// The doubles go to every other member with the first phase's floats (one
// wait for both: they cost no latency of their own); `received` holds every
// member's, by rank.
void post_values(const ExchangeGroup& group, int self, int size, double* values, int value_count,
                 std::vector<double>& received, std::vector<MPI_Request>& requests, int tag) {
  received.assign(static_cast<std::size_t>(size) * value_count, 0.0);
  if (value_count == 0) return;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == self) continue;
    requests.emplace_back();
    GT_MPI_CHECK(MPI_Irecv(received.data() + static_cast<std::size_t>(peer) * value_count, value_count, MPI_DOUBLE, peer,
                           tag, group.comm, &requests.back()));
    requests.emplace_back();
    GT_MPI_CHECK(MPI_Isend(values, value_count, MPI_DOUBLE, peer, tag, group.comm, &requests.back()));
  }
}

// After the wait: the sums in rank order, the same bits on every member.
void add_values(int self, int size, double* values, int value_count, std::vector<double>& received) {
  for (int i = 0; i < value_count; ++i) received[static_cast<std::size_t>(self) * value_count + i] = values[i];
  for (int i = 0; i < value_count; ++i) {
    double total = 0;
    for (int member = 0; member < size; ++member) total += received[static_cast<std::size_t>(member) * value_count + i];
    values[i] = total;
  }
}

// Posts the receive of `bytes` from `peer` and the send of `sent` to it.
void post_bytes(const ExchangeGroup& group, int peer, const std::vector<std::uint8_t>& sent,
                std::vector<std::uint8_t>& received, int tag, std::vector<MPI_Request>& requests) {
  requests.emplace_back();
  GT_MPI_CHECK(MPI_Irecv(received.data(), checked_count(received.size(), group.what), MPI_BYTE, peer, tag, group.comm,
                         &requests.back()));
  requests.emplace_back();
  GT_MPI_CHECK(MPI_Isend(sent.data(), checked_count(sent.size(), group.what), MPI_BYTE, peer, tag, group.comm,
                         &requests.back()));
}

// The members grouped by site (ExchangeGroup::site_of_member numbers the
// sites in order of their first member); no sites: one group of all.
std::vector<std::vector<int>> members_by_site(const std::vector<int>& site_of_member, int size) {
  const bool given = static_cast<int>(site_of_member.size()) == size;
  std::vector<std::vector<int>> sites;
  for (int m = 0; m < size; ++m) {
    const auto site = given ? static_cast<std::size_t>(site_of_member[static_cast<std::size_t>(m)]) : 0;
    if (sites.size() <= site) sites.resize(site + 1);
    sites[site].push_back(m);
  }
  return sites;
}

// " (ranks 2, 3)": the other members of a group, for deadline messages.
std::string members_except(const std::vector<int>& ranks, int self) {
  std::string text;
  for (int r : ranks) {
    if (r == self) continue;
    text += (text.empty() ? "" : ", ") + std::to_string(r);
  }
  return " (waiting for rank" + std::string(text.find(',') == std::string::npos ? " " : "s ") + text + ")";
}

void ensure_feedback(std::vector<ErrorFeedback>& feedback, std::size_t count, const WireCodec& codec) {
  while (feedback.size() < count) feedback.emplace_back(codec);
}

}  // namespace

// Only on an exception path: the requests must not outlive their buffers.
ExchangeInFlight::~ExchangeInFlight() { cancel_pending(requests_); }

std::size_t ExchangeInFlight::shard_begin(int shard) const {
  return count_ * static_cast<std::size_t>(shard) / static_cast<std::size_t>(size_);
}

void ExchangeInFlight::start(const ExchangeGroup& group, int tag_base, float* data, std::size_t count, double* values,
                             int value_count, const WireCodec* codec, EncodedSumState* state) {
  if (phase_ != Phase::done) abort_all(group.what + ": an exchange started twice");
  group_ = &group, tag_base_ = tag_base, data_ = data, count_ = count;
  values_ = values, value_count_ = value_count, codec_ = codec, state_ = state;
  GT_MPI_CHECK(MPI_Comm_rank(group.comm, &self_));
  GT_MPI_CHECK(MPI_Comm_size(group.comm, &size_));
  if (size_ == 1) return;
  if (value_count > 0) post_values(group, self_, size_, values, value_count, received_values_, requests_, tag_base_ + kValuesTag);
  phase_ = Phase::first;
  if (count_ == 0) return;
  if (codec_ != nullptr) {
    post_encoded_shards();
  } else if (size_ == 2) {
    received_.resize(count_);
    requests_.resize(requests_.size() + 2);
    post_swap(group, self_, data_, received_.data(), count_, &requests_[requests_.size() - 2], &requests_.back(),
              tag_base_ + kPairTag);
  } else {
    post_shards();
  }
}

// Reduce-scatter: member k owns shard k and receives everyone's copy of it.
void ExchangeInFlight::post_shards() {
  const std::size_t own_count = shard_begin(self_ + 1) - shard_begin(self_);
  received_.resize(own_count * static_cast<std::size_t>(size_));
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == self_) continue;
    requests_.emplace_back();
    GT_MPI_CHECK(MPI_Irecv(received_.data() + own_count * static_cast<std::size_t>(peer),
                           checked_count(own_count, group_->what), MPI_FLOAT, peer, tag_base_ + kShardTag, group_->comm,
                           &requests_.back()));
    requests_.emplace_back();
    GT_MPI_CHECK(MPI_Isend(data_ + shard_begin(peer), checked_count(shard_begin(peer + 1) - shard_begin(peer), group_->what),
                           MPI_FLOAT, peer, tag_base_ + kShardTag, group_->comm, &requests_.back()));
  }
}

// Every shard encoded for its owner (two members: the whole tensor, to the
// other); this member's own, decoded, joins its sum.
void ExchangeInFlight::post_encoded_shards() {
  const int parts = size_ == 2 ? 1 : size_;
  auto begin = [&](int shard) { return size_ == 2 ? std::size_t{0} : shard_begin(shard); };
  auto length = [&](int shard) { return size_ == 2 ? count_ : shard_begin(shard + 1) - shard_begin(shard); };
  ensure_feedback(state_->shards, static_cast<std::size_t>(parts), *codec_);
  if (size_ > 2) ensure_feedback(state_->owned, 1, *codec_);
  sent_bytes_.assign(static_cast<std::size_t>(size_), {});
  received_bytes_.assign(static_cast<std::size_t>(size_), {});
  const int own = size_ == 2 ? 0 : self_;
  own_part_.resize(length(own));
  std::vector<float> scratch(size_ == 2 ? 0 : count_);
  for (int peer = 0; peer < size_; ++peer) {
    if (size_ == 2 && peer == self_) continue;
    const int shard = size_ == 2 ? 0 : peer;
    std::vector<std::uint8_t>& sent = sent_bytes_[peer];
    sent.resize(codec_->encoded_bytes(length(shard)));
    float* decoded = shard == own ? own_part_.data() : scratch.data();
    state_->shards[shard].encode(data_ + begin(shard), length(shard), sent.data(), decoded);
    if (peer == self_) continue;
    received_bytes_[peer].resize(codec_->encoded_bytes(length(own)));
    post_bytes(*group_, peer, sent, received_bytes_[peer], tag_base_ + kEncodedTag, requests_);
  }
}

bool ExchangeInFlight::progress() {
  while (phase_ != Phase::done) {
    if (!requests_complete(requests_)) return false;
    advance();
  }
  return true;
}

void ExchangeInFlight::finish() {
  while (phase_ != Phase::done) {
    if (!requests_.empty()) wait_all_or_abort(requests_, group_->deadline_s, group_->what, -1, 2e-4, group_->world_ranks);
    requests_.clear();
    advance();
  }
}

// The current phase's requests are complete: what it received is used.
void ExchangeInFlight::advance() {
  if (phase_ == Phase::second) {
    if (codec_ != nullptr) {
      for (int peer = 0; peer < size_; ++peer) {
        if (peer != self_) codec_->decode(received_bytes_[peer].data(), shard_begin(peer + 1) - shard_begin(peer), data_ + shard_begin(peer));
      }
    }
    phase_ = Phase::done;
    return;
  }
  add_values(self_, size_, values_, value_count_, received_values_);
  phase_ = Phase::done;
  if (count_ == 0) return;
  if (size_ == 2) {
    if (codec_ != nullptr) {
      received_.resize(count_);
      codec_->decode(received_bytes_[1 - self_].data(), count_, received_.data());
      for (std::size_t i = 0; i < count_; ++i) data_[i] = own_part_[i] + received_[i];  // a + b == b + a
    } else {
      for (std::size_t i = 0; i < count_; ++i) data_[i] += received_[i];  // both members get the same bits
    }
    return;
  }
  if (codec_ != nullptr) {
    gather_encoded_sum();
  } else {
    gather_sum();
  }
  phase_ = Phase::second;
}

// The owner adds its shard's copies (each site's in rank order, then the
// sites' sums in site order), then sends the sum to all.
void ExchangeInFlight::gather_sum() {
  const std::size_t own_begin = shard_begin(self_), own_count = shard_begin(self_ + 1) - own_begin;
  std::copy(data_ + own_begin, data_ + own_begin + own_count, received_.data() + own_count * static_cast<std::size_t>(self_));
  const std::vector<std::vector<int>> sites = members_by_site(group_->site_of_member, size_);
  for (std::size_t i = 0; i < own_count; ++i) {
    float total = 0;
    for (std::size_t s = 0; s < sites.size(); ++s) {
      float partial = received_[own_count * static_cast<std::size_t>(sites[s].front()) + i];
      for (std::size_t m = 1; m < sites[s].size(); ++m) partial += received_[own_count * static_cast<std::size_t>(sites[s][m]) + i];
      total = s == 0 ? partial : total + partial;
    }
    data_[own_begin + i] = total;
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == self_) continue;
    requests_.emplace_back();
    GT_MPI_CHECK(MPI_Irecv(data_ + shard_begin(peer), checked_count(shard_begin(peer + 1) - shard_begin(peer), group_->what),
                           MPI_FLOAT, peer, tag_base_ + kGatherTag, group_->comm, &requests_.back()));
    requests_.emplace_back();
    GT_MPI_CHECK(MPI_Isend(data_ + own_begin, checked_count(own_count, group_->what), MPI_FLOAT, peer,
                           tag_base_ + kGatherTag, group_->comm, &requests_.back()));
  }
}

// The owner decodes and adds the contributions in rank order (the same sum
// wherever it is computed), encodes the sum once and sends it to all;
// everyone, the owner included, keeps the decoded bytes.
void ExchangeInFlight::gather_encoded_sum() {
  const std::size_t own_begin = shard_begin(self_), own_count = shard_begin(self_ + 1) - own_begin;
  std::vector<float> total(own_count, 0.0f), part(own_count);
  for (int member = 0; member < size_; ++member) {
    const float* contribution = own_part_.data();
    if (member != self_) {
      codec_->decode(received_bytes_[member].data(), own_count, part.data());
      contribution = part.data();
    }
    for (std::size_t i = 0; i < own_count; ++i) total[i] += contribution[i];
  }
  summed_bytes_.resize(codec_->encoded_bytes(own_count));
  state_->owned[0].encode(total.data(), own_count, summed_bytes_.data(), data_ + own_begin);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == self_) continue;
    received_bytes_[peer].resize(codec_->encoded_bytes(shard_begin(peer + 1) - shard_begin(peer)));
    post_bytes(*group_, peer, summed_bytes_, received_bytes_[peer], tag_base_ + kGatherTag, requests_);
  }
}

ExchangeGroup exchange_group(MPI_Comm comm, std::vector<int> world_ranks, double deadline_s, const std::string& what,
                             int self) {
  ExchangeGroup group;
  group.comm = comm;
  group.what = what + members_except(world_ranks, self);
  group.world_ranks = std::move(world_ranks);
  group.deadline_s = deadline_s;
  return group;
}

void exchange_sum(const ExchangeGroup& group, float* data, std::size_t count, double* values, int value_count) {
  ExchangeInFlight exchange;
  exchange.start(group, 0, data, count, values, value_count, nullptr, nullptr);
  exchange.finish();
}

void exchange_sum_encoded(const ExchangeGroup& group, const WireCodec& codec, EncodedSumState& state, float* data,
                          std::size_t count, double* values, int value_count) {
  ExchangeInFlight exchange;
  exchange.start(group, 0, data, count, values, value_count, &codec, &state);
  exchange.finish();
}

std::vector<std::pair<std::string, std::vector<float>>> EncodedSumState::residuals() const {
  std::vector<std::pair<std::string, std::vector<float>>> named;
  for (std::size_t k = 0; k < shards.size(); ++k) named.emplace_back("shard_" + std::to_string(k), shards[k].residual());
  if (!owned.empty()) named.emplace_back("owned", owned.front().residual());
  return named;
}

void EncodedSumState::restore(const WireCodec& codec,
                              const std::vector<std::pair<std::string, std::vector<float>>>& residuals) {
  for (const auto& [name, residual] : residuals) {
    std::vector<ErrorFeedback>* target = &owned;
    std::size_t index = 0;
    if (name.rfind("shard_", 0) == 0) {
      target = &shards;
      index = std::stoul(name.substr(6));
      if (index >= 65536) throw std::invalid_argument("error-feedback residual '" + name + "': shard out of range");
    } else if (name != "owned") {
      throw std::invalid_argument("error-feedback residual '" + name + "': not shard_<k> or owned");
    }
    ensure_feedback(*target, index + 1, codec);
    (*target)[index].set_residual(residual);
  }
}

}  // namespace geotrain::runtime
