#include "geotrain/job/nccl_training.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "geotrain/common/cuda_check.hpp"
#include "geotrain/mpi/mpi_check.hpp"

namespace geotrain::runtime {

namespace {

// The NCCL member of the checked-call family (common/check.hpp).
void check_nccl(ncclResult_t code, const char* call, const char* file, int line) {
  if (code != ncclSuccess) call_failed({"NCCL", call, file, line}, ncclGetErrorString(code));
}
#define GT_NCCL_CHECK(call) check_nccl((call), #call, __FILE__, __LINE__)

// An owned NCCL communicator over the members of `group` (an MPI
// communicator): its rank 0 makes the id, MPI broadcasts it.
class NcclComm {
 public:
  NcclComm() = default;
  NcclComm(MPI_Comm group, double deadline_s, const std::string& what) {
    int rank = 0, size = 1;
    GT_MPI_CHECK(MPI_Comm_rank(group, &rank));
    GT_MPI_CHECK(MPI_Comm_size(group, &size));
    ncclUniqueId id{};
    if (rank == 0) GT_NCCL_CHECK(ncclGetUniqueId(&id));
    std::vector<std::uint8_t> bytes(reinterpret_cast<std::uint8_t*>(&id), reinterpret_cast<std::uint8_t*>(&id) + sizeof id);
    bytes = broadcast_bytes(group, bytes, 0, deadline_s, "sending the NCCL id of " + what);
    if (bytes.size() != sizeof id) abort_all("NCCL id of " + what + " has the wrong size");
    std::memcpy(&id, bytes.data(), sizeof id);
    GT_NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank));
  }
  ~NcclComm() {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  NcclComm(NcclComm&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  NcclComm& operator=(NcclComm&& other) noexcept {
    std::swap(comm_, other.comm_);
    return *this;
  }
  ncclComm_t get() const { return comm_; }
  void abort() {
    if (comm_ != nullptr) ncclCommAbort(comm_), comm_ = nullptr;
  }

 private:
  ncclComm_t comm_ = nullptr;
};

// Polls `event` until it completes or the deadline passes; then aborts
// `comm` (so no kernel waits forever) and the job, naming what and who.
void wait_event_or_abort(cudaEvent_t event, NcclComm& comm, double deadline_s, const std::string& what) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(deadline_s));
  for (;;) {
    const cudaError_t state = cudaEventQuery(event);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady) {
      call_failed({"CUDA", "cudaEventQuery(event)", __FILE__, __LINE__}, cuda_error_text(state));
    }
    if (clock::now() >= deadline) {
      comm.abort();
      abort_all("no answer within " + std::to_string(deadline_s) + " s while " + what);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// A 2-rank MPI communicator {a, b} out of `world` (collective over world:
// every rank calls it with its own pair, or with a < 0 for none).
MPI_Comm pair_comm(MPI_Comm world, int color, int key) {
  MPI_Comm pair = MPI_COMM_NULL;
  GT_MPI_CHECK(MPI_Comm_split(world, color < 0 ? MPI_UNDEFINED : color, key, &pair));
  return pair;
}

class NcclLinks : public PipelineLinks {
 public:
  NcclLinks(const Topology& t, kernels::Backend& backend, double deadline_s)
      : compute_(static_cast<cudaStream_t>(backend.native_stream())), backend_(backend), t_(t),
        deadline_s_(deadline_s) {
    GT_CUDA_CHECK(cudaStreamCreateWithFlags(&send_stream_, cudaStreamNonBlocking));
    GT_CUDA_CHECK(cudaEventCreateWithFlags(&received_, cudaEventDisableTiming));
    // Boundary b joins stage b and b + 1 of a replica (of one tensor rank);
    // color = boundary index over all replicas and tensor ranks. Two rounds
    // (even, odd boundaries) so each rank is in at most one pair per split;
    // two directions per boundary.
    MPI_Comm world = t.pipeline_links.get();
    const int boundaries = t.pipeline_stages - 1;
    const auto boundary = [&](int b) { return (t.replica * boundaries + b) * t.tensor_parallel + t.tensor_rank; };
    for (int parity = 0; parity < 2; ++parity) {
      for (int direction = 0; direction < 2; ++direction) {
        int color = -1, key = 0;
        if (t.next_rank >= 0 && t.stage % 2 == parity) color = boundary(t.stage), key = 0;
        if (t.previous_rank >= 0 && (t.stage - 1) % 2 == parity) color = boundary(t.stage - 1), key = 1;
        MPI_Comm pair = pair_comm(world, color, key);
        if (pair == MPI_COMM_NULL) continue;
        const bool with_next = key == 0;
        NcclComm comm(pair, deadline_s, std::string(direction == 0 ? "activations" : "gradients") + " of boundary " +
                                            std::to_string(with_next ? t.stage : t.stage - 1));
        MPI_Comm_free(&pair);
        // direction 0: activations flow down (stage -> stage + 1); 1: gradients flow up.
        (with_next ? (direction == 0 ? activations_to_next_ : gradients_from_next_)
                   : (direction == 0 ? activations_from_previous_ : gradients_to_previous_)) = std::move(comm);
      }
    }
  }
  ~NcclLinks() override {
    for (Pending& p : pending_) {
      cudaEventDestroy(p.done);
      backend_.release(p.buffer);
    }
    for (float* b : spare_) backend_.release(b);
    cudaEventDestroy(received_);
    cudaStreamDestroy(send_stream_);
  }
  bool takes_device_memory() const override { return true; }

  void send_activation(const float* data, std::size_t n, int) override { send(data, n, activations_to_next_, t_.next_rank); }
  void send_gradient(const float* data, std::size_t n, int) override { send(data, n, gradients_to_previous_, t_.previous_rank); }
  void receive_activation(float* data, std::size_t n, int i) override {
    receive(data, n, activations_from_previous_, t_.previous_rank, "activations", i);
  }
  void receive_gradient(float* data, std::size_t n, int i) override {
    receive(data, n, gradients_from_next_, t_.next_rank, "activation gradients", i);
  }
  void complete_sends() override {
    for (Pending& p : pending_) {
      wait_event_or_abort(p.done, *p.comm, deadline_s_, "sending to rank " + std::to_string(p.peer));
      cudaEventDestroy(p.done);
      spare_.push_back(p.buffer);
    }
    pending_.clear();
  }

 private:
  struct Pending {
    float* buffer;
    cudaEvent_t done;
    NcclComm* comm;
    int peer;
  };

  void send(const float* data, std::size_t n, NcclComm& comm, int peer) {
    // A private copy on the compute stream (the stage reuses its buffers),
    // then the send on the send stream once the copy is done.
    float* copy = nullptr;
    if (!spare_.empty()) copy = spare_.back(), spare_.pop_back();
    else copy = backend_.alloc(n);
    GT_CUDA_CHECK(cudaMemcpyAsync(copy, data, n * sizeof(float), cudaMemcpyDeviceToDevice, compute_));
    cudaEvent_t copied, done;
    GT_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    GT_CUDA_CHECK(cudaEventRecord(copied, compute_));
    GT_CUDA_CHECK(cudaStreamWaitEvent(send_stream_, copied, 0));
    GT_CUDA_CHECK(cudaEventDestroy(copied));
    GT_NCCL_CHECK(ncclSend(copy, n, ncclFloat, 1 - rank_in(comm), comm.get(), send_stream_));
    GT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    GT_CUDA_CHECK(cudaEventRecord(done, send_stream_));
    pending_.push_back({copy, done, &comm, peer});
  }

  void receive(float* data, std::size_t n, NcclComm& comm, int peer, const char* what, int micro_batch) {
    GT_NCCL_CHECK(ncclRecv(data, n, ncclFloat, 1 - rank_in(comm), comm.get(), compute_));
    GT_CUDA_CHECK(cudaEventRecord(received_, compute_));
    wait_event_or_abort(received_, comm, deadline_s_,
                        std::string("waiting for ") + what + " of micro-batch " + std::to_string(micro_batch) +
                            " from rank " + std::to_string(peer));
  }

  static int rank_in(NcclComm& comm) {
    int rank = 0;
    GT_NCCL_CHECK(ncclCommUserRank(comm.get(), &rank));
    return rank;
  }

  cudaStream_t compute_;
  cudaStream_t send_stream_ = nullptr;
  cudaEvent_t received_ = nullptr;
  kernels::Backend& backend_;
  const Topology& t_;
  double deadline_s_;
  NcclComm activations_to_next_, gradients_from_next_, activations_from_previous_, gradients_to_previous_;
  std::deque<Pending> pending_;
  std::vector<float*> spare_;
};

class NcclCollectives : public Collectives {
 public:
  NcclCollectives(const Topology& t, kernels::Backend& backend, MpiCollectives& scalars, double deadline_s)
      : stream_(static_cast<cudaStream_t>(backend.native_stream())), t_(t), scalars_(scalars),
        deadline_s_(deadline_s) {
    GT_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    if (t.data_parallel > 1) data_parallel_ = NcclComm(t.dp_comm.get(), deadline_s, "the data-parallel group");
    if (t.tied_comm.get() != MPI_COMM_NULL) tied_ = NcclComm(t.tied_comm.get(), deadline_s, "the tied embedding");
  }
  ~NcclCollectives() override { cudaEventDestroy(done_); }
  bool takes_device_memory() const override { return true; }
  void sum_data_parallel(float* data, std::size_t n) override {
    all_reduce(data, n, data_parallel_, "summing gradients over the data-parallel group of stage " + std::to_string(t_.stage));
  }
  void sum_tied_embedding(float* data, std::size_t n) override {
    all_reduce(data, n, tied_, "joining the tied embedding of replica " + std::to_string(t_.replica));
  }
  double sum_over_pipeline(double value) override { return scalars_.sum_over_pipeline(value); }
  void sum_over_pipeline_values(double* values, int count) override { scalars_.sum_over_pipeline_values(values, count); }
  double sum_data_parallel_value(double value) override { return scalars_.sum_data_parallel_value(value); }
  void sum_data_parallel_values(double* values, int count) override { scalars_.sum_data_parallel_values(values, count); }

 private:
  void all_reduce(float* data, std::size_t n, NcclComm& comm, const std::string& what) {
    if (comm.get() == nullptr) abort_all(what + ": no NCCL communicator");
    GT_NCCL_CHECK(ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm.get(), stream_));
    GT_CUDA_CHECK(cudaEventRecord(done_, stream_));
    wait_event_or_abort(done_, comm, deadline_s_, what);
  }

  cudaStream_t stream_;
  cudaEvent_t done_ = nullptr;
  const Topology& t_;
  MpiCollectives& scalars_;
  double deadline_s_;
  NcclComm data_parallel_, tied_;
};

// The unit's sums on the GPU (ncclAllReduce on the compute stream: every
// member gets the same bits); host doubles and checkpoint tensors over MPI.
class NcclTensorGroup : public model::TensorGroup {
 public:
  NcclTensorGroup(const Topology& t, kernels::Backend& backend, std::unique_ptr<MpiTensorGroup> host,
                  double deadline_s)
      : stream_(static_cast<cudaStream_t>(backend.native_stream())), host_(std::move(host)),
        comm_(t.tensor_comm.get(), deadline_s, "the tensor-parallel group"), deadline_s_(deadline_s) {
    GT_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclTensorGroup() override { cudaEventDestroy(done_); }
  int size() const override { return host_->size(); }
  int rank() const override { return host_->rank(); }
  void sum(float* data, std::size_t count) override { all_reduce(data, count, ncclSum); }
  void max(float* data, std::size_t count) override { all_reduce(data, count, ncclMax); }
  void sum_values(double* values, int count) override { host_->sum_values(values, count); }
  void sum_host(float* data, std::size_t count) override { host_->sum_host(data, count); }

 private:
  void all_reduce(float* data, std::size_t count, ncclRedOp_t op) {
    GT_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat, op, comm_.get(), stream_));
    GT_CUDA_CHECK(cudaEventRecord(done_, stream_));
    wait_event_or_abort(done_, comm_, deadline_s_, "summing a layer's parts over the tensor-parallel group");
  }
  cudaStream_t stream_;
  std::unique_ptr<MpiTensorGroup> host_;
  NcclComm comm_;
  double deadline_s_;
  cudaEvent_t done_ = nullptr;
};

}  // namespace

std::unique_ptr<model::TensorGroup> make_nccl_tensor_group(const Topology& topology, kernels::Backend& backend,
                                                           double deadline_s) {
  return std::make_unique<NcclTensorGroup>(topology, backend,
                                           std::make_unique<MpiTensorGroup>(topology, backend, deadline_s), deadline_s);
}

std::unique_ptr<PipelineLinks> make_nccl_links(const Topology& topology, kernels::Backend& backend, double deadline_s) {
  return std::make_unique<NcclLinks>(topology, backend, deadline_s);
}

std::unique_ptr<Collectives> make_nccl_collectives(const Topology& topology, kernels::Backend& backend,
                                                   MpiCollectives& scalars, double deadline_s) {
  return std::make_unique<NcclCollectives>(topology, backend, scalars, deadline_s);
}

}  // namespace geotrain::runtime
