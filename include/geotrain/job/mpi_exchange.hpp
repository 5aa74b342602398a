// Sums over a small group of ranks on a slow network by direct exchange:
// every member sends straight to every other, so a phase costs one latency
// of the group's slowest link, where a tree pays log2(p) of them, a ring
// p - 1, and Open MPI's in-place non-blocking all-reduce a reduce to one
// rank followed by a broadcast (twice the bytes through each link for two
// members). Every member sums the contributions in rank order, so all get
// the same bits.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "geotrain/runtime/wire_codec.hpp"

namespace geotrain::runtime {

struct ExchangeGroup {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<int> world_ranks;  // the members by rank in `comm` (named when one falls silent)
  double deadline_s = 0;
  std::string what;  // "summing gradients over ..." for the deadline's message
  // Per member, its site (numbered in order of first member; empty: one
  // site). Sums add each site's members in rank order, then the sites'
  // sums in site order: the order the hierarchical exchange
  // (hierarchical_exchange.hpp) adds in, so that both give the same bits.
  std::vector<int> site_of_member;
};

// The group of `comm`, whose members are `world_ranks` (by rank in it);
// `what` and the members other than `self` (a world rank) name its waits.
ExchangeGroup exchange_group(MPI_Comm comm, std::vector<int> world_ranks, double deadline_s, const std::string& what,
                             int self);

// Sums `count` floats at `data` and `value_count` doubles at `values` over
// the group, in place. Two members swap whole buffers (one latency, n bytes
// each way); more reduce-scatter then all-gather 1/p shards directly (two
// latencies, 2n(p-1)/p bytes out of each member, spread over its links).
// The floats add by site (ExchangeGroup::site_of_member), the doubles in rank order.
void exchange_sum(const ExchangeGroup& group, float* data, std::size_t count, double* values = nullptr,
                  int value_count = 0);

// exchange_sum's lossy twin for data-parallel gradients: what goes on the
// wire is encoded (WireCodec), with error feedback on both passes. Two
// members swap their encoded buffers and both add the two decoded tensors.
// More: each member encodes the shard every other member owns (error
// feedback `shards`, one per shard), the owner adds the decoded
// contributions in rank order, encodes the sum (error feedback `owned`) and
// sends it to all; every member, the owner included, keeps the decoded sum.
// Either way every member ends with the same bits, so replicas stay identical.
// The doubles go exact.
struct EncodedSumState {
  std::vector<ErrorFeedback> shards;  // one per member's shard (two members: one, the whole tensor)
  std::vector<ErrorFeedback> owned;   // at most one: this member's summed shard
  // "shard_<k>" and "owned" with their residuals, and back.
  std::vector<std::pair<std::string, std::vector<float>>> residuals() const;
  void restore(const WireCodec& codec, const std::vector<std::pair<std::string, std::vector<float>>>& residuals);
};
void exchange_sum_encoded(const ExchangeGroup& group, const WireCodec& codec, EncodedSumState& state, float* data,
                          std::size_t count, double* values = nullptr, int value_count = 0);

// One sum in flight (exchange_sum and exchange_sum_encoded are start() then
// finish()): start() posts the first phase; progress() advances it without
// blocking and returns true once the sum is in `data`; finish() waits, each
// wait with the group's deadline. Between start and completion `data` and
// `values` must stay untouched, and the object must not move. Sums in flight
// together on one group need distinct `tag_base`s (multiples of 8), started
// in the same order on every member. `codec` null: fp32, exact.
class ExchangeInFlight {
 public:
  ExchangeInFlight() = default;
  ExchangeInFlight(const ExchangeInFlight&) = delete;
  ExchangeInFlight& operator=(const ExchangeInFlight&) = delete;
  ~ExchangeInFlight();
  void start(const ExchangeGroup& group, int tag_base, float* data, std::size_t count, double* values, int value_count,
             const WireCodec* codec, EncodedSumState* state);
  bool progress();
  void finish();

 private:
  enum class Phase { done, first, second };
  std::size_t shard_begin(int shard) const;
  void post_shards();
  void post_encoded_shards();
  void advance();
  void gather_sum();
  void gather_encoded_sum();

  Phase phase_ = Phase::done;
  const ExchangeGroup* group_ = nullptr;
  int tag_base_ = 0, self_ = 0, size_ = 1, value_count_ = 0;
  float* data_ = nullptr;
  std::size_t count_ = 0;
  double* values_ = nullptr;
  const WireCodec* codec_ = nullptr;
  EncodedSumState* state_ = nullptr;
  std::vector<MPI_Request> requests_;
  std::vector<double> received_values_;
  std::vector<float> received_, own_part_;
  std::vector<std::vector<std::uint8_t>> sent_bytes_, received_bytes_;
  std::vector<std::uint8_t> summed_bytes_;
};

}  // namespace geotrain::runtime
