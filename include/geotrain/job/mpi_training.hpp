// The trainer's links and collectives over MPI (the job that uses them:
// distributed_job.hpp).
#pragma once
#include <mpi.h>

#include <deque>
#include <iosfwd>
#include <optional>
#include <vector>

#include "geotrain/io/config.hpp"
#include "geotrain/model/gpt.hpp"
#include "geotrain/runtime/gradient_sync.hpp"
#include "geotrain/job/hierarchical_exchange.hpp"
#include "geotrain/job/mpi_exchange.hpp"
#include "geotrain/mpi/mpi_plan.hpp"
#include "geotrain/runtime/pipeline.hpp"
#include "geotrain/runtime/staged_buffer.hpp"
#include "geotrain/runtime/trainer.hpp"

namespace geotrain::runtime {

// Activations to the next stage and gradients to the previous one, over the
// topology's duplicated world communicator. Tag = 2 * micro-batch +
// (gradient ? 1 : 0): the two directions and different micro-batches never
// match each other. Sends are non-blocking on a private copy (a blocking
// send could deadlock 1F1B, where both neighbours send before receiving);
// every wait has the deadline and names the silent peer.
class MpiPipelineLinks : public PipelineLinks {
 public:
  MpiPipelineLinks(const Topology& topology, double deadline_s);
  ~MpiPipelineLinks() override;
  void send_activation(const float* data, std::size_t count, int micro_batch) override;
  void receive_activation(float* data, std::size_t count, int micro_batch) override;
  void send_gradient(const float* data, std::size_t count, int micro_batch) override;
  void receive_gradient(float* data, std::size_t count, int micro_batch) override;
  void complete_sends() override;
  void wait_for_arrival(int micro_batch, bool gradient) override;
  int previous_peer() const override { return previous_; }
  int next_peer() const override { return next_; }

 private:
  struct PendingSend {
    std::vector<float> data;
    MPI_Request request = MPI_REQUEST_NULL;
    int peer = -1;
  };
  void send(const float* data, std::size_t count, int peer, int tag, const char* what);
  void receive(float* data, std::size_t count, int peer, int tag, const char* what);
  void reap_completed_sends();

  MPI_Comm comm_;
  int previous_, next_, stage_;
  double deadline_s_;
  std::deque<PendingSend> pending_;
  std::vector<std::vector<float>> spare_;  // buffers of completed sends, reused
};

// Sums over the topology's communicators by direct exchange
// (mpi_exchange.hpp: one latency per phase, the same bits on every member),
// each wait with the deadline and the group's ranks named.
class MpiCollectives : public Collectives {
 public:
  // `gradient_codec`: how sum_data_parallel* put gradients on the wire,
  // `tied_codec` the tied embedding's sums (fp32: exactly; lossy formats
  // keep their error feedback here).
  // `hierarchical`: the data-parallel sums go inside each site first
  // (hierarchical_exchange.hpp; the topology must be made with sites).
  MpiCollectives(const Topology& topology, double deadline_s, WireCodec gradient_codec = {},
                 WireCodec tied_codec = {}, bool hierarchical = false);
  // The same, but the data-parallel sums go over this rank's site group only
  // (topology.site_comm): local steps' per-step sum inside a site.
  struct WithinSite {};
  MpiCollectives(const Topology& topology, double deadline_s, WithinSite);
  void sum_data_parallel(float* host_data, std::size_t count) override;
  void sum_data_parallel_with_values(float* host_data, std::size_t count, double* values, int value_count) override;
  void sum_tied_embedding(float* host_data, std::size_t count) override;
  bool splits_tied_embedding() const override { return true; }
  void start_tied_embedding(float* host_data, std::size_t count) override;
  void finish_tied_embedding() override;
  double sum_over_pipeline(double value) override;
  void sum_over_pipeline_values(double* values, int count) override;
  void start_pipeline_values(double* values, int count) override;
  void finish_pipeline_values() override;
  double sum_data_parallel_value(double value) override;
  void sum_data_parallel_values(double* values, int count) override;
  void start_data_parallel_bucket(float* host_data, std::size_t count, double* values, int value_count) override;
  void progress_data_parallel() override;
  void finish_data_parallel_buckets() override;
  void start_data_parallel_fragment(int fragment, float* host_data, std::size_t count) override;
  // The whole-tensor sum's as "shard_<k>" / "owned", bucket b's as "bucket_<b>.shard_<k>" ...,
  // the tied embedding's as "tied_embedding.shard_0".
  NamedResiduals gradient_residuals() const override;
  void restore_gradient_residuals(const NamedResiduals& residuals) override;
  void forget_data_parallel_residuals() override;

 private:
  const ExchangeGroup& tied_group() const;
  // Starts the sum of `data` as bucket `slot` (its tag base and error-feedback state).
  void start_bucket(std::size_t slot, float* data, std::size_t count, double* values, int value_count);
  const Topology& topology_;
  ExchangeGroup data_parallel_, pipeline_, tied_;
  WireCodec gradient_codec_;
  EncodedSumState gradient_state_;              // the sum of a whole tensor
  // Bucket b's, by its place in the step: a deque, because exchanges in
  // flight point at theirs while later buckets add slots.
  std::deque<EncodedSumState> bucket_states_;
  std::deque<ExchangeInFlight> buckets_;         // this step's, in flight (a deque: they must not move)
  std::optional<SiteLanes> lanes_;               // hierarchical: the sums go through these
  std::deque<HierarchicalInFlight> site_buckets_;  // this step's, hierarchical
  WireCodec tied_codec_;
  EncodedSumState tied_state_;
  ExchangeInFlight tied_in_flight_;  // the last stage's half of the tied embedding
  ExchangeInFlight pipeline_values_in_flight_;
};

// The sums of a tensor-parallel unit (model/tensor_parallel.hpp) over
// topology.tensor_comm: exchange_sum (every member gets the same bits) and
// an all-reduce MAX, each wait with the deadline. Device memory goes through
// the host.
class MpiTensorGroup : public model::TensorGroup {
 public:
  MpiTensorGroup(const Topology& topology, kernels::Backend& backend, double deadline_s);
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void sum(float* data, std::size_t count) override;
  void max(float* data, std::size_t count) override;
  void sum_values(double* values, int count) override;
  void sum_host(float* data, std::size_t count) override;

 private:
  ExchangeGroup group_;
  int size_, rank_;
  bool host_memory_;     // the backend's memory is the host's (the CPU): no staging
  StagedBuffer staged_;  // a GPU's buffers, through the host
};

}  // namespace geotrain::runtime
