#include "geotrain/runtime/mpi_exchange.hpp"

#include <algorithm>
#include <climits>
#include <stdexcept>

#include "geotrain/runtime/mpi_check.hpp"

namespace geotrain::runtime {
namespace {

// The group's communicators carry no other point-to-point traffic; one
// exchange completes before the next starts, so fixed tags never mix.
constexpr int kShardTag = 1, kValuesTag = 2, kGatherTag = 3, kPairTag = 4, kEncodedTag = 5;

int checked_count(std::size_t count, const std::string& what) {
  if (count > static_cast<std::size_t>(INT_MAX)) abort_all(what + ": over 2^31 elements in one message");
  return static_cast<int>(count);
}

void wait(const ExchangeGroup& group, std::vector<MPI_Request>& requests) {
  if (requests.empty()) return;
  wait_all_or_abort(requests, group.deadline_s, group.what, -1, 2e-4, group.world_ranks);
  requests.clear();
}

// A two-member swap: the other member's `count` floats into `received`,
// this member's out of `sent`.
void post_swap(const ExchangeGroup& group, int self, const float* sent, float* received, std::size_t count,
               MPI_Request* receive, MPI_Request* send) {
  const int n = checked_count(count, group.what);
  GT_MPI_CHECK(MPI_Irecv(received, n, MPI_FLOAT, 1 - self, kPairTag, group.comm, receive));
  GT_MPI_CHECK(MPI_Isend(sent, n, MPI_FLOAT, 1 - self, kPairTag, group.comm, send));
}

// The doubles go to every other member with the first phase's floats (one
// wait for both: they cost no latency of their own); `received` holds every
// member's, by rank.
void post_values(const ExchangeGroup& group, int self, int size, double* values, int value_count,
                 std::vector<double>& received, std::vector<MPI_Request>& requests) {
  received.assign(static_cast<std::size_t>(size) * value_count, 0.0);
  if (value_count == 0) return;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == self) continue;
    requests.emplace_back();
    GT_MPI_CHECK(MPI_Irecv(received.data() + static_cast<std::size_t>(peer) * value_count, value_count, MPI_DOUBLE, peer,
                           kValuesTag, group.comm, &requests.back()));
    requests.emplace_back();
    GT_MPI_CHECK(MPI_Isend(values, value_count, MPI_DOUBLE, peer, kValuesTag, group.comm, &requests.back()));
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

// One sum in progress: this member's place, its requests, and the doubles,
// which travel with the first phase.
struct Exchange {
  int self = 0, size = 1;
  std::vector<MPI_Request> requests;
  std::vector<double> received_values;
};

Exchange begin_exchange(const ExchangeGroup& group, double* values, int value_count) {
  Exchange x;
  GT_MPI_CHECK(MPI_Comm_rank(group.comm, &x.self));
  GT_MPI_CHECK(MPI_Comm_size(group.comm, &x.size));
  if (x.size > 1) post_values(group, x.self, x.size, values, value_count, x.received_values, x.requests);
  return x;
}

}  // namespace

void exchange_sum(const ExchangeGroup& group, float* data, std::size_t count, double* values, int value_count) {
  auto [self, size, requests, received_values] = begin_exchange(group, values, value_count);
  if (size == 1) return;
  if (count == 0) {
    wait(group, requests);
    add_values(self, size, values, value_count, received_values);
    return;
  }
  if (size == 2) {
    std::vector<float> received(count);
    requests.resize(requests.size() + 2);
    post_swap(group, self, data, received.data(), count, &requests[requests.size() - 2], &requests.back());
    wait(group, requests);
    add_values(self, size, values, value_count, received_values);
    for (std::size_t i = 0; i < count; ++i) data[i] += received[i];  // a + b == b + a: both get the same bits
    return;
  }
  auto begin = [&](int shard) { return count * static_cast<std::size_t>(shard) / static_cast<std::size_t>(size); };
  const std::size_t own_begin = begin(self), own_count = begin(self + 1) - own_begin;
  // Reduce-scatter: member k owns shard k and receives everyone's copy of it.
  std::vector<float> received(own_count * static_cast<std::size_t>(size));
  for (int peer = 0; peer < size; ++peer) {
    if (peer == self) continue;
    requests.emplace_back();
    GT_MPI_CHECK(MPI_Irecv(received.data() + own_count * static_cast<std::size_t>(peer), checked_count(own_count, group.what),
                           MPI_FLOAT, peer, kShardTag, group.comm, &requests.back()));
    requests.emplace_back();
    GT_MPI_CHECK(MPI_Isend(data + begin(peer), checked_count(begin(peer + 1) - begin(peer), group.what), MPI_FLOAT,
                           peer, kShardTag, group.comm, &requests.back()));
  }
  wait(group, requests);
  add_values(self, size, values, value_count, received_values);
  std::copy(data + own_begin, data + own_begin + own_count, received.data() + own_count * static_cast<std::size_t>(self));
  for (std::size_t i = 0; i < own_count; ++i) {
    float total = received[i];
    for (int member = 1; member < size; ++member) total += received[own_count * static_cast<std::size_t>(member) + i];
    data[own_begin + i] = total;
  }
  // All-gather: each owner sends its summed shard to every other member.
  for (int peer = 0; peer < size; ++peer) {
    if (peer == self) continue;
    requests.emplace_back();
    GT_MPI_CHECK(MPI_Irecv(data + begin(peer), checked_count(begin(peer + 1) - begin(peer), group.what), MPI_FLOAT,
                           peer, kGatherTag, group.comm, &requests.back()));
    requests.emplace_back();
    GT_MPI_CHECK(MPI_Isend(data + own_begin, checked_count(own_count, group.what), MPI_FLOAT, peer, kGatherTag,
                           group.comm, &requests.back()));
  }
  wait(group, requests);
}

namespace {

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

void ensure_feedback(std::vector<ErrorFeedback>& feedback, std::size_t count, const WireCodec& codec) {
  while (feedback.size() < count) feedback.emplace_back(codec);
}

}  // namespace

void exchange_sum_encoded(const ExchangeGroup& group, const WireCodec& codec, EncodedSumState& state, float* data,
                          std::size_t count, double* values, int value_count) {
  auto [self, size, requests, received_values] = begin_exchange(group, values, value_count);
  if (size == 1) return;
  if (size == 2) {
    ensure_feedback(state.shards, 1, codec);
    std::vector<std::uint8_t> mine(codec.encoded_bytes(count)), theirs(mine.size());
    std::vector<float> own(count), other(count);
    state.shards[0].encode(data, count, mine.data(), own.data());
    post_bytes(group, 1 - self, mine, theirs, kEncodedTag, requests);
    wait(group, requests);
    add_values(self, size, values, value_count, received_values);
    codec.decode(theirs.data(), count, other.data());
    for (std::size_t i = 0; i < count; ++i) data[i] = own[i] + other[i];  // a + b == b + a
    return;
  }
  auto begin = [&](int shard) { return count * static_cast<std::size_t>(shard) / static_cast<std::size_t>(size); };
  auto length = [&](int shard) { return begin(shard + 1) - begin(shard); };
  ensure_feedback(state.shards, static_cast<std::size_t>(size), codec);
  ensure_feedback(state.owned, 1, codec);
  // Pass 1: every shard encoded for its owner; this member's own, decoded, joins its sum.
  std::vector<std::vector<std::uint8_t>> sent(size), received(size);
  std::vector<float> own_part(length(self)), scratch(count);
  for (int peer = 0; peer < size; ++peer) {
    sent[peer].resize(codec.encoded_bytes(length(peer)));
    float* decoded = peer == self ? own_part.data() : scratch.data();
    state.shards[peer].encode(data + begin(peer), length(peer), sent[peer].data(), decoded);
    if (peer == self) continue;
    received[peer].resize(codec.encoded_bytes(length(self)));
    post_bytes(group, peer, sent[peer], received[peer], kEncodedTag, requests);
  }
  wait(group, requests);
  add_values(self, size, values, value_count, received_values);
  std::vector<float> total(length(self), 0.0f), part(length(self));
  for (int member = 0; member < size; ++member) {  // rank order: the same sum wherever it is computed
    if (member == self) {
      for (std::size_t i = 0; i < total.size(); ++i) total[i] += own_part[i];
      continue;
    }
    codec.decode(received[member].data(), length(self), part.data());
    for (std::size_t i = 0; i < total.size(); ++i) total[i] += part[i];
  }
  // Pass 2: the owner's sum, encoded once; everyone keeps the decoded bytes.
  std::vector<std::uint8_t> summed(codec.encoded_bytes(length(self)));
  state.owned[0].encode(total.data(), total.size(), summed.data(), data + begin(self));
  for (int peer = 0; peer < size; ++peer) {
    if (peer == self) continue;
    received[peer].resize(codec.encoded_bytes(length(peer)));
    post_bytes(group, peer, summed, received[peer], kGatherTag, requests);
  }
  wait(group, requests);
  for (int peer = 0; peer < size; ++peer) {
    if (peer != self) codec.decode(received[peer].data(), length(peer), data + begin(peer));
  }
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

PendingPairSum::~PendingPairSum() {
  // Only on an exception path: the requests must not outlive their buffers.
  for (MPI_Request& request : requests_) {
    if (request != MPI_REQUEST_NULL) {
      MPI_Cancel(&request);
      MPI_Request_free(&request);
    }
  }
}

void PendingPairSum::start(const ExchangeGroup& group, float* data, std::size_t count) {
  int self = 0, size = 1;
  GT_MPI_CHECK(MPI_Comm_rank(group.comm, &self));
  GT_MPI_CHECK(MPI_Comm_size(group.comm, &size));
  if (size != 2) abort_all(group.what + ": a pair sum over " + std::to_string(size) + " ranks");
  if (data_ != nullptr) abort_all(group.what + ": started twice");
  group_ = &group;
  data_ = data;
  count_ = count;
  sent_.assign(data, data + count);
  received_.resize(count);
  post_swap(group, self, sent_.data(), received_.data(), count, &requests_[0], &requests_[1]);
}

void PendingPairSum::finish() {
  if (data_ == nullptr) return;
  wait_all_or_abort(requests_, group_->deadline_s, group_->what, -1, 2e-4, group_->world_ranks);
  for (std::size_t i = 0; i < count_; ++i) data_[i] += received_[i];
  data_ = nullptr;
}

}  // namespace geotrain::runtime
