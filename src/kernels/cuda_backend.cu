// The CUDA backend: device memory, one non-blocking stream, one cuBLAS handle
// bound to it, and the scratch buffers of the ops (cuda_ops.cuh). Every op is
// queued on the stream; upload returns once the host buffer may be reused
// (it goes through a pinned staging buffer); download, sum_of_squares and
// crossentropy_forward wait for their results; synchronize() waits for all.
//
// Device choice: the process's local rank modulo the visible devices, from
// the first of OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID,
// LOCAL_RANK that is set (device 0 otherwise), so that ranks sharing a node
// spread over its GPUs; CUDA_VISIBLE_DEVICES narrows the choice as usual.
//
// Errors: every CUDA and cuBLAS call is checked (common/cuda_check.hpp: a
// RunError, or the job's abort under mpirun); without a usable GPU the
// constructor throws RunError with the CUDA error string (cudaGetDeviceCount
// fails without a driver, or reports 0 devices).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "cuda_backend.hpp"
#include "cuda_ops.cuh"
#include "geotrain/common/cuda_check.hpp"
#include "geotrain/common/errors.hpp"

namespace geotrain::kernels {
namespace {

int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    char* end = nullptr;
    const long rank = std::strtol(value, &end, 10);
    if (*end == '\0' && rank >= 0) return static_cast<int>(rank);
  }
  return 0;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
      // Clear the (non-sticky) error so that later CUDA calls in the process
      // do not report it.
      (void)cudaGetLastError();
      const std::string reason = status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device found";
      throw geotrain::RunError("device = cuda: no usable GPU (" + reason + "); use device = auto or cpu");
    }
    device_ = local_rank() % count;
    GT_CUDA_CHECK(cudaSetDevice(device_));
    GT_CUDA_CHECK(cudaGetDeviceProperties(&properties_, device_));
    GT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    try {
      GT_CUDA_CHECK(cublasCreate(&blas_));
      GT_CUDA_CHECK(cublasSetStream(blas_, stream_));
      // Default math mode: with CUBLAS_COMPUTE_32F cuBLAS uses no TF32, so
      // fp32 GEMMs are plain SGEMMs; bf16 is asked for per call (matmul.cu).
      GT_CUDA_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
      GT_CUDA_CHECK(cublasGetVersion(blas_, &blas_version_));
    } catch (...) {
      destroy_handles();
      throw;
    }
    work_ = std::make_unique<cuda::Workspace>();
    context_.stream = stream_;
    context_.blas = blas_;
    context_.precision = MatmulPrecision::fp32;
    context_.work = work_.get();
  }

  ~CudaBackend() override {
    if (stream_ != nullptr) GT_CUDA_WARN(cudaStreamSynchronize(stream_));
    work_.reset();  // frees the scratch buffers while the device is still set
    destroy_handles();
  }

  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  DeviceKind kind() const override { return DeviceKind::cuda; }
  void* native_stream() override { return stream_; }
  double device_memory_bytes() const override { return static_cast<double>(properties_.totalGlobalMem); }

  std::string description() const override {
    const double gib = static_cast<double>(properties_.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
    char memory[32];
    std::snprintf(memory, sizeof memory, "%.0f GiB", gib);
    std::string text = std::string("CUDA, ") + properties_.name + " (compute capability " +
                       std::to_string(properties_.major) + "." + std::to_string(properties_.minor) + ", " +
                       std::to_string(properties_.multiProcessorCount) + " SMs, " + memory + "), device " +
                       std::to_string(device_) + ", cuBLAS " + std::to_string(blas_version_);
    text += context_.precision == MatmulPrecision::bf16 ? ", bf16 GEMM operands (fp32 accumulation)"
                                                        : ", fp32 GEMMs (no TF32)";
    return text;
  }

  // ---- memory
  float* alloc(std::size_t count) override { return static_cast<float*>(allocate_zeroed(count * sizeof(float))); }
  int* alloc_tokens(std::size_t count) override { return static_cast<int*>(allocate_zeroed(count * sizeof(int))); }
  void release(void* pointer) override {
    if (pointer == nullptr) return;
    // Kernels still queued may use the buffer: wait for them first.
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    GT_CUDA_CHECK(cudaFree(pointer));
  }
  void upload(float* device, const float* host, std::size_t count) override {
    copy_in(device, host, count * sizeof(float));
  }
  void upload_tokens(int* device, const int* host, std::size_t count) override {
    copy_in(device, host, count * sizeof(int));
  }
  void download(float* host, const float* device, std::size_t count) override {
    if (count == 0) return;
    GT_CUDA_CHECK(cudaMemcpyAsync(host, device, count * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void fill_zero(float* device, std::size_t count) override {
    if (count == 0) return;
    GT_CUDA_CHECK(cudaMemsetAsync(device, 0, count * sizeof(float), stream_));
  }
  void synchronize() override { GT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  // ---- ops
  void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T,
                         int C) override {
    cuda::embedding_forward(context_, out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T,
                          int C) override {
    cuda::embedding_backward(context_, dwte, dwpe, dout, tokens, B, T, C);
  }
  void embedding_shard_forward(float* out, const int* tokens, const float* wte_rows, const float* wpe, int B, int T,
                               int C, int vocab_begin, int vocab_rows) override {
    cuda::embedding_shard_forward(context_, out, tokens, wte_rows, wpe, B, T, C, vocab_begin, vocab_rows);
  }
  void embedding_shard_backward(float* dwte_rows, float* dwpe, const float* dout, const int* tokens, int B, int T,
                                int C, int vocab_begin, int vocab_rows) override {
    cuda::embedding_shard_backward(context_, dwte_rows, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_rows);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) override {
    cuda::layernorm_forward(context_, out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override {
    cuda::layernorm_backward(context_, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd, const float* a,
                                  const float* b, const float* weight, const float* bias, int N, int C) override {
    cuda::residual_layernorm_forward(context_, residual, out, mean, rstd, a, b, weight, bias, N, C);
  }
  void matmul_gelu_forward(float* out, float* pre, const float* inp, const float* weight, const float* bias, int N,
                           int C, int OC) override {
    cuda::matmul_gelu_forward(context_, out, pre, inp, weight, bias, N, C, OC);
  }
  void matmul_gelu_backward(float* dinp, float* dweight, float* dbias, float* dpre, const float* dout,
                            const float* pre, const float* inp, const float* weight, int N, int C, int OC) override {
    cuda::matmul_gelu_backward(context_, dinp, dweight, dbias, dpre, dout, pre, inp, weight, N, C, OC);
  }
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                      int OC) override {
    cuda::matmul_forward(context_, out, inp, weight, bias, N, C, OC);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int C, int OC) override {
    cuda::matmul_backward(context_, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  void set_matmul_precision(MatmulPrecision precision) override { context_.precision = precision; }
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) override {
    cuda::attention_forward(context_, out, lse, qkv, B, T, C, NH);
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* out,
                          const float* lse, int B, int T, int C, int NH) override {
    cuda::attention_backward(context_, dqkv, scratch, dout, qkv, out, lse, B, T, C, NH);
  }
  void gelu_forward(float* out, const float* inp, std::size_t n) override {
    cuda::gelu_forward(context_, out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) override {
    cuda::gelu_backward(context_, dinp, inp, dout, n);
  }
  void residual_forward(float* out, const float* a, const float* b, std::size_t n) override {
    cuda::residual_forward(context_, out, a, b, n);
  }
  void accumulate(float* y, const float* x, std::size_t n) override { cuda::accumulate(context_, y, x, n); }
  std::uint16_t* alloc_bf16(std::size_t count) override {
    return static_cast<std::uint16_t*>(allocate_zeroed(count * sizeof(std::uint16_t)));
  }
  void to_bf16(std::uint16_t* out, const float* in, std::size_t n) override { cuda::to_bf16(context_, out, in, n); }
  void from_bf16(float* out, const std::uint16_t* in, std::size_t n) override {
    cuda::from_bf16(context_, out, in, n);
  }
  void scale(float* x, float factor, std::size_t n) override { cuda::scale(context_, x, factor, n); }
  double sum_of_squares(const float* x, std::size_t n) override { return cuda::sum_of_squares(context_, x, n); }
  void crossentropy_forward(float* losses, const float* logits, const int* targets, int N, int V) override {
    cuda::crossentropy_forward(context_, losses, logits, targets, N, V);
  }
  void crossentropy_backward(float* dlogits, const float* logits, const int* targets, float dloss, int N,
                             int V) override {
    cuda::crossentropy_backward(context_, dlogits, logits, targets, dloss, N, V);
  }
  void crossentropy_shard_max(float* row_max, const float* logits, int N, int V) override {
    cuda::crossentropy_shard_max(context_, row_max, logits, N, V);
  }
  void crossentropy_shard_statistics(float* stats, const float* logits, const int* targets, const float* row_max,
                                     int N, int V, int vocab_begin) override {
    cuda::crossentropy_shard_statistics(context_, stats, logits, targets, row_max, N, V, vocab_begin);
  }
  void crossentropy_shard_backward(float* dlogits, const float* logits, const int* targets, const float* row_max,
                                   const float* stats, float dloss, int N, int V, int vocab_begin) override {
    cuda::crossentropy_shard_backward(context_, dlogits, logits, targets, row_max, stats, dloss, N, V, vocab_begin);
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int step) override {
    cuda::adamw_update(context_, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
  }

 private:
  void* allocate_zeroed(std::size_t bytes) {
    // Never 0 bytes: every allocation is a distinct pointer release() can free.
    const std::size_t size = bytes == 0 ? 256 : bytes;
    void* pointer = nullptr;
    GT_CUDA_CHECK(cudaMalloc(&pointer, size));
    const cudaError_t status = cudaMemsetAsync(pointer, 0, size, stream_);
    if (status != cudaSuccess) {
      GT_CUDA_WARN(cudaFree(pointer));
      GT_CUDA_CHECK(status);
    }
    return pointer;
  }

  // Host to device through a pinned staging buffer, so that the caller may
  // reuse its (pageable) buffer as soon as upload returns while the copy
  // stays asynchronous and ordered on the stream. The staging buffer is
  // refilled only after the event of its previous copy has passed.
  void copy_in(void* device, const void* host, std::size_t bytes) {
    if (bytes == 0) return;
    if (staging_ == nullptr) {
      GT_CUDA_CHECK(cudaMallocHost(&staging_, kStagingBytes));
      GT_CUDA_CHECK(cudaEventCreateWithFlags(&staging_done_, cudaEventDisableTiming));
      GT_CUDA_CHECK(cudaEventRecord(staging_done_, stream_));
    }
    const auto* from = static_cast<const char*>(host);
    auto* to = static_cast<char*>(device);
    for (std::size_t done = 0; done < bytes; done += kStagingBytes) {
      const std::size_t chunk = std::min(kStagingBytes, bytes - done);
      GT_CUDA_CHECK(cudaEventSynchronize(staging_done_));
      std::memcpy(staging_, from + done, chunk);
      GT_CUDA_CHECK(cudaMemcpyAsync(to + done, staging_, chunk, cudaMemcpyHostToDevice, stream_));
      GT_CUDA_CHECK(cudaEventRecord(staging_done_, stream_));
    }
  }

  void destroy_handles() noexcept {
    if (staging_done_ != nullptr) GT_CUDA_WARN(cudaEventDestroy(staging_done_));
    if (staging_ != nullptr) GT_CUDA_WARN(cudaFreeHost(staging_));
    staging_done_ = nullptr;
    staging_ = nullptr;
    if (blas_ != nullptr) GT_CUDA_WARN(cublasDestroy(blas_));
    if (stream_ != nullptr) GT_CUDA_WARN(cudaStreamDestroy(stream_));
    blas_ = nullptr;
    stream_ = nullptr;
  }

  static constexpr std::size_t kStagingBytes = std::size_t{16} << 20;

  int device_ = 0;
  cudaDeviceProp properties_{};
  int blas_version_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* staging_ = nullptr;  // pinned, kStagingBytes
  cudaEvent_t staging_done_ = nullptr;
  std::unique_ptr<cuda::Workspace> work_;
  cuda::Context context_;
};

}  // namespace

std::unique_ptr<Backend> create_cuda_backend() { return std::make_unique<CudaBackend>(); }

}  // namespace geotrain::kernels
