#include "geotrain/runtime/mpi_exchange.hpp"

#include <algorithm>
#include <climits>

#include "geotrain/runtime/mpi_check.hpp"

namespace geotrain::runtime {
namespace {

// The group's communicators carry no other point-to-point traffic; one
// exchange completes before the next starts, so fixed tags never mix.
constexpr int kShardTag = 1, kValuesTag = 2, kGatherTag = 3, kPairTag = 4;

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

}  // namespace

void exchange_sum(const ExchangeGroup& group, float* data, std::size_t count, double* values, int value_count) {
  int self = 0, size = 1;
  GT_MPI_CHECK(MPI_Comm_rank(group.comm, &self));
  GT_MPI_CHECK(MPI_Comm_size(group.comm, &size));
  if (size == 1) return;
  std::vector<MPI_Request> requests;
  std::vector<double> received_values;
  post_values(group, self, size, values, value_count, received_values, requests);
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
