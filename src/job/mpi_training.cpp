#include "geotrain/job/mpi_training.hpp"

#include <cstring>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "geotrain/common/errors.hpp"
#include "geotrain/mpi/mpi_check.hpp"

namespace geotrain::runtime {
namespace {

int tag_of(int micro_batch, bool gradient) { return 2 * micro_batch + (gradient ? 1 : 0); }

std::string describe_message(const char* what, int micro_batch) {
  return std::string(what) + " of micro-batch " + std::to_string(micro_batch);
}

}  // namespace

MpiPipelineLinks::MpiPipelineLinks(const Topology& topology, double deadline_s)
    : comm_(topology.pipeline_links.get()), previous_(topology.previous_rank), next_(topology.next_rank),
      stage_(topology.stage), deadline_s_(deadline_s) {}

MpiPipelineLinks::~MpiPipelineLinks() {
  // Normally empty (complete_sends ends every step); on an exception path
  // the requests must not outlive their buffers.
  for (PendingSend& p : pending_) {
    if (p.request != MPI_REQUEST_NULL) {
      MPI_Cancel(&p.request);
      MPI_Request_free(&p.request);
    }
  }
}

void MpiPipelineLinks::reap_completed_sends() {
  while (!pending_.empty()) {
    int done = 0;
    GT_MPI_CHECK(MPI_Test(&pending_.front().request, &done, MPI_STATUS_IGNORE));
    if (!done) return;
    spare_.push_back(std::move(pending_.front().data));
    pending_.pop_front();
  }
}

void MpiPipelineLinks::send(const float* data, std::size_t count, int peer, int tag, const char* what) {
  if (peer < 0) abort_all(std::string("pipeline stage ") + std::to_string(stage_) + " has no peer to send " + what + " to");
  if (count > static_cast<std::size_t>(INT32_MAX)) abort_all(std::string(what) + ": message over 2^31 floats");
  reap_completed_sends();
  PendingSend p;
  if (!spare_.empty()) {
    p.data = std::move(spare_.back());
    spare_.pop_back();
  }
  p.data.assign(data, data + count);
  p.peer = peer;
  pending_.push_back(std::move(p));
  PendingSend& sent = pending_.back();
  GT_MPI_CHECK(MPI_Isend(sent.data.data(), static_cast<int>(count), MPI_FLOAT, peer, tag, comm_, &sent.request));
}

void MpiPipelineLinks::receive(float* data, std::size_t count, int peer, int tag, const char* what) {
  if (peer < 0) abort_all(std::string("pipeline stage ") + std::to_string(stage_) + " has no peer to receive " + what + " from");
  MPI_Request request;
  GT_MPI_CHECK(MPI_Irecv(data, static_cast<int>(count), MPI_FLOAT, peer, tag, comm_, &request));
  // Our own sends progress while we wait (the same MPI_Test calls drive them).
  wait_all_or_abort({&request, 1}, deadline_s_, std::string("waiting for ") + describe_message(what, tag / 2),
                    peer);
}

void MpiPipelineLinks::send_activation(const float* data, std::size_t count, int i) {
  send(data, count, next_, tag_of(i, false), "activations");
}
void MpiPipelineLinks::receive_activation(float* data, std::size_t count, int i) {
  receive(data, count, previous_, tag_of(i, false), "activations");
}
void MpiPipelineLinks::send_gradient(const float* data, std::size_t count, int i) {
  send(data, count, previous_, tag_of(i, true), "activation gradients");
}
void MpiPipelineLinks::receive_gradient(float* data, std::size_t count, int i) {
  receive(data, count, next_, tag_of(i, true), "activation gradients");
}

void MpiPipelineLinks::wait_for_arrival(int micro_batch, bool gradient) {
  const int peer = gradient ? next_ : previous_;
  if (peer < 0) return;  // receive() reports the missing peer
  wait_for_message_or_abort(comm_, peer, tag_of(micro_batch, gradient), deadline_s_,
                            "waiting for " + describe_message(gradient ? "activation gradients" : "activations",
                                                              micro_batch));
}

void MpiPipelineLinks::complete_sends() {
  if (pending_.empty()) return;
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  for (const PendingSend& p : pending_) requests.push_back(p.request), peers.push_back(p.peer);
  wait_each_or_abort(requests, peers, deadline_s_, "sending activations / gradients to the next pipeline stages");
  for (PendingSend& p : pending_) spare_.push_back(std::move(p.data));
  pending_.clear();
}

namespace {

// The codec a sum encodes with, or nullptr where the format is fp32 (an exact sum).
const WireCodec* lossy(const WireCodec& codec) { return codec.format == WireFormat::fp32 ? nullptr : &codec; }

// A blocking sum of `data` over `group`: exact, or encoded with `codec` and its error feedback in `state`.
void sum_on_wire(const ExchangeGroup& group, const WireCodec& codec, EncodedSumState& state, float* data,
                 std::size_t count, double* values = nullptr, int value_count = 0) {
  if (lossy(codec) == nullptr) {
    exchange_sum(group, data, count, values, value_count);
  } else {
    exchange_sum_encoded(group, codec, state, data, count, values, value_count);
  }
}

}  // namespace

MpiCollectives::MpiCollectives(const Topology& topology, double deadline_s, WireCodec gradient_codec,
                               WireCodec tied_codec, bool hierarchical)
    : topology_(topology),
      data_parallel_(exchange_group(topology.dp_comm.get(), topology.dp_ranks, deadline_s,
                                    "summing over the data-parallel group of stage " + std::to_string(topology.stage),
                                    topology.rank)),
      pipeline_(exchange_group(topology.pipeline_comm.get(), topology.pipeline_ranks, deadline_s,
                               "summing over the pipeline of replica " + std::to_string(topology.replica),
                               topology.rank)),
      tied_(exchange_group(topology.tied_comm.get(),
                           {topology.pipeline_ranks.front(), topology.pipeline_ranks.back()}, deadline_s,
                           "joining the tied embedding of replica " + std::to_string(topology.replica),
                           topology.rank)),
      gradient_codec_(gradient_codec),
      tied_codec_(tied_codec) {
  // Sums add by site where sites are known, whichever exchange runs them.
  data_parallel_.site_of_member = topology.site_of_replica;
  if (hierarchical) lanes_.emplace(site_lanes(topology, deadline_s));
}

MpiCollectives::MpiCollectives(const Topology& topology, double deadline_s, WithinSite)
    : MpiCollectives(topology, deadline_s) {
  data_parallel_ = exchange_group(topology.site_comm.get(), topology.site_ranks, deadline_s,
                                  "summing over the data-parallel group of stage " + std::to_string(topology.stage) +
                                      " inside its site",
                                  topology.rank);
}

void MpiCollectives::sum_data_parallel(float* data, std::size_t count) {
  sum_data_parallel_with_values(data, count, nullptr, 0);
}

void MpiCollectives::sum_data_parallel_with_values(float* data, std::size_t count, double* values, int value_count) {
  if (lanes_) {
    exchange_sum_hierarchical(*lanes_, data, count, values, value_count, lossy(gradient_codec_), &gradient_state_);
  } else {
    sum_on_wire(data_parallel_, gradient_codec_, gradient_state_, data, count, values, value_count);
  }
}

void MpiCollectives::start_data_parallel_bucket(float* data, std::size_t count, double* values, int value_count) {
  start_bucket(buckets_.size() + site_buckets_.size(), data, count, values, value_count);
}

// Local steps exchange no gradient buckets: a fragment takes the bucket slot
// of its index, so that its error feedback stays its own.
void MpiCollectives::start_data_parallel_fragment(int fragment, float* data, std::size_t count) {
  start_bucket(static_cast<std::size_t>(fragment), data, count, nullptr, 0);
}

void MpiCollectives::start_bucket(std::size_t b, float* data, std::size_t count, double* values, int value_count) {
  if (bucket_states_.size() <= b) bucket_states_.resize(b + 1);
  // Tag bases past the whole-tensor sum's (0); reused after 4000 buckets,
  // which is safe: both members post them in the same order (MPI keeps it).
  const int tag_base = 8 * (1 + static_cast<int>(b % 4000));
  if (lanes_) {
    site_buckets_.emplace_back().start(*lanes_, tag_base, data, count, values, value_count, lossy(gradient_codec_),
                                       &bucket_states_[b]);
    return;
  }
  buckets_.emplace_back().start(data_parallel_, tag_base, data, count, values, value_count, lossy(gradient_codec_),
                                &bucket_states_[b]);
}

void MpiCollectives::progress_data_parallel() {
  for (ExchangeInFlight& bucket : buckets_) bucket.progress();
  for (HierarchicalInFlight& bucket : site_buckets_) bucket.progress();
}

void MpiCollectives::finish_data_parallel_buckets() {
  for (ExchangeInFlight& bucket : buckets_) bucket.finish();
  for (HierarchicalInFlight& bucket : site_buckets_) bucket.finish();
  buckets_.clear();
  site_buckets_.clear();
}

void MpiCollectives::forget_data_parallel_residuals() {
  if (!buckets_.empty() || !site_buckets_.empty()) throw std::logic_error("forget_data_parallel_residuals: sums still in flight");
  gradient_state_ = {};
  bucket_states_.clear();
}

namespace {
constexpr std::string_view kTiedPrefix = "tied_embedding.";
}  // namespace

NamedResiduals MpiCollectives::gradient_residuals() const {
  NamedResiduals named = gradient_state_.residuals();
  for (std::size_t b = 0; b < bucket_states_.size(); ++b) {
    for (auto& [part, residual] : bucket_states_[b].residuals()) {
      named.emplace_back("bucket_" + std::to_string(b) + "." + part, std::move(residual));
    }
  }
  for (auto& [part, residual] : tied_state_.residuals()) named.emplace_back(std::string(kTiedPrefix) + part, std::move(residual));
  return named;
}

void MpiCollectives::restore_gradient_residuals(const NamedResiduals& residuals) {
  NamedResiduals whole;
  std::vector<NamedResiduals> by_bucket;
  NamedResiduals tied;
  for (const auto& [name, residual] : residuals) {
    if (name.rfind(kTiedPrefix, 0) == 0) {
      tied.emplace_back(name.substr(kTiedPrefix.size()), residual);
      continue;
    }
    if (name.rfind("bucket_", 0) != 0) {
      whole.emplace_back(name, residual);
      continue;
    }
    const std::size_t dot = name.find('.');
    const unsigned long b = std::stoul(name.substr(7, dot - 7));
    if (dot == std::string::npos || b >= 65536) throw std::invalid_argument("error-feedback residual '" + name + "': bad bucket");
    if (by_bucket.size() <= b) by_bucket.resize(b + 1);
    by_bucket[b].emplace_back(name.substr(dot + 1), residual);
  }
  gradient_state_.restore(gradient_codec_, whole);
  if (bucket_states_.size() < by_bucket.size()) bucket_states_.resize(by_bucket.size());
  for (std::size_t b = 0; b < by_bucket.size(); ++b) bucket_states_[b].restore(gradient_codec_, by_bucket[b]);
  tied_state_.restore(tied_codec_, tied);
}

const ExchangeGroup& MpiCollectives::tied_group() const {
  if (topology_.tied_comm.get() == MPI_COMM_NULL) abort_all("the tied embedding's sum called on a middle stage");
  return tied_;
}

void MpiCollectives::sum_tied_embedding(float* data, std::size_t count) {
  sum_on_wire(tied_group(), tied_codec_, tied_state_, data, count);
}

void MpiCollectives::start_tied_embedding(float* data, std::size_t count) {
  tied_in_flight_.start(tied_group(), 0, data, count, nullptr, 0, lossy(tied_codec_), &tied_state_);
}

void MpiCollectives::finish_tied_embedding() { tied_in_flight_.finish(); }

double MpiCollectives::sum_over_pipeline(double value) {
  sum_over_pipeline_values(&value, 1);
  return value;
}

void MpiCollectives::sum_over_pipeline_values(double* values, int count) {
  exchange_sum(pipeline_, nullptr, 0, values, count);
}

// Tag base 8: apart from the blocking sums (0) that the same group makes.
void MpiCollectives::start_pipeline_values(double* values, int count) {
  pipeline_values_in_flight_.start(pipeline_, 8, nullptr, 0, values, count, nullptr, nullptr);
}

void MpiCollectives::finish_pipeline_values() { pipeline_values_in_flight_.finish(); }

void MpiCollectives::sum_data_parallel_values(double* values, int count) {
  exchange_sum(data_parallel_, nullptr, 0, values, count);
}

double MpiCollectives::sum_data_parallel_value(double value) {
  exchange_sum(data_parallel_, nullptr, 0, &value, 1);
  return value;
}

MpiTensorGroup::MpiTensorGroup(const Topology& topology, kernels::Backend& backend, double deadline_s)
    : group_(exchange_group(topology.tensor_comm.get(), topology.tensor_ranks, deadline_s,
                            "summing a layer's parts over the tensor-parallel group", topology.rank)),
      size_(topology.tensor_parallel), rank_(topology.tensor_rank),
      host_memory_(backend.kind() == kernels::DeviceKind::cpu), staged_(backend) {
  if (topology.tensor_comm.get() == MPI_COMM_NULL) abort_all("MpiTensorGroup: this rank has no tensor-parallel group");
}

void MpiTensorGroup::sum(float* data, std::size_t count) {
  exchange_sum(group_, staged_.updatable(data, count, host_memory_), count);
  staged_.written();
}

void MpiTensorGroup::sum_host(float* data, std::size_t count) { exchange_sum(group_, data, count); }

void MpiTensorGroup::max(float* data, std::size_t count) {
  float* host = staged_.updatable(data, count, host_memory_);
  MPI_Request request;
  GT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, host, static_cast<int>(count), MPI_FLOAT, MPI_MAX, group_.comm, &request));
  wait_collective_or_abort({&request, 1}, group_.comm, -1, group_.deadline_s, group_.what);
  staged_.written();
}

void MpiTensorGroup::sum_values(double* values, int count) { exchange_sum(group_, nullptr, 0, values, count); }

}  // namespace geotrain::runtime
