// The CPU backend: host memory and the CPU twins of every op (cpu_ops.hpp).
//
// Threading. Two thread pools live in this process: OpenMP's (the loops of
// the non-GEMM ops) and OpenBLAS's (sgemm; Debian's libopenblas0-pthread has
// its own pthreads pool, which keeps GEMM blocking and operand packing tuned
// per core type and shared between threads). They take turns and are never
// nested: no op calls BLAS from inside an OpenMP region, and matmul does all
// of its work - the bias broadcast and the bias gradient included - in BLAS
// calls, so each op runs in exactly one pool. Nesting (OpenMP threads each
// calling a threaded sgemm) would oversubscribe the cores; PyTorch, which
// mixes the two layers, ran a small GPT 2.1x slower on the 2-core CI machine
// than with OPENBLAS_NUM_THREADS=1.
//
// Taking turns still costs something: an idle pool keeps spinning before
// its threads sleep - OpenBLAS's workers ~0.1 s after every GEMM
// (2^28 cycles), libgomp's ~5 ms after every parallel region (measured as
// process CPU time while the caller sleeps) - and competes with the active
// pool for the cores. Both are fixed only by the environment, read when the
// libraries load (so not settable from here):
//   OPENBLAS_THREAD_TIMEOUT=4 OMP_WAIT_POLICY=passive
// made one transformer block (bench_kernels, 2 cores) 1.3-1.5x faster at
// h=128 and 1.1-1.4x at GPT-2 124M sizes, and up to 6x when other processes
// shared the cores. When matmul still ran its bias loops in OpenMP, it
// reached 0.6-0.8 of sgemm's throughput; all in BLAS, 0.95-1.0.
// Each pool is sized by its own variable (OMP_NUM_THREADS,
// OPENBLAS_NUM_THREADS); both default to the number of cores.
//
// Why not Kokkos. The design lists Kokkos as the portable kernel layer, but
// Debian's build (libtrilinos-kokkos-dev 3.4) has only the Serial execution
// space: every Kokkos::parallel_for would run on one core, and the host
// threads would have to come from OpenMP anyway. The ops here are plain loops
// with OpenMP pragmas instead - one fewer dependency, the same code a reader
// of llm.c expects. What that gives up: one kernel source for CPU and GPU
// (with a Kokkos built for OpenMP and CUDA, each op's two twins could be one
// file); here the CUDA twins are hand-written kernels, held to the CPU ones by
// the shared golden tests.
//
// Memory is ordinary host memory, 64-byte aligned (a cache line, one AVX-512
// vector) and zeroed; "device" pointers are host pointers, so upload and
// download are copies and synchronize() has nothing to wait for.
#include <omp.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>

#include "cpu_blas.hpp"
#include "cpu_ops.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/kernels/backend.hpp"

namespace geotrain::kernels {
namespace {

constexpr std::size_t kAlignment = 64;

void* allocate_zeroed(std::size_t bytes) {
  // aligned_alloc wants a multiple of the alignment; never ask for 0 bytes,
  // so that every allocation is a distinct pointer that release() can free.
  const std::size_t rounded = (bytes / kAlignment + 1) * kAlignment;
  void* pointer = std::aligned_alloc(kAlignment, rounded);
  if (pointer == nullptr) {
    throw geotrain::RunError("CPU backend: out of host memory allocating " + std::to_string(bytes) +
                             " bytes");
  }
  std::memset(pointer, 0, rounded);
  return pointer;
}

std::string blas_name() {
  const std::string core = cpu::blas_core_name();
  return core.empty() ? std::string("BLAS (not OpenBLAS)") : "OpenBLAS (" + core + ")";
}

class CpuBackend final : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu; }

  // e.g. "CPU, OpenBLAS (Haswell) 2 threads, OpenMP 2 threads"
  std::string description() const override {
    std::ostringstream text;
    text << "CPU, " << blas_name();
    if (const int blas_threads = cpu::blas_thread_count(); blas_threads > 0) text << " " << blas_threads << " threads";
    text << ", OpenMP " << omp_get_max_threads() << " threads";
    if (precision_ == MatmulPrecision::bf16) text << ", bf16 GEMM operands (emulated)";
    return text.str();
  }

  // ---- memory
  float* alloc(std::size_t count) override {
    return static_cast<float*>(allocate_zeroed(count * sizeof(float)));
  }
  int* alloc_tokens(std::size_t count) override {
    return static_cast<int*>(allocate_zeroed(count * sizeof(int)));
  }
  void release(void* pointer) override { std::free(pointer); }
  void upload(float* device, const float* host, std::size_t count) override {
    copy(device, host, count * sizeof(float));
  }
  void upload_tokens(int* device, const int* host, std::size_t count) override {
    copy(device, host, count * sizeof(int));
  }
  void download(float* host, const float* device, std::size_t count) override {
    copy(host, device, count * sizeof(float));
  }
  void fill_zero(float* device, std::size_t count) override {
    if (count > 0) std::memset(device, 0, count * sizeof(float));
  }
  void synchronize() override {}

  // ---- ops
  void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T,
                         int C) override {
    cpu::embedding_forward(out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T,
                          int C) override {
    cpu::embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void embedding_shard_forward(float* out, const int* tokens, const float* wte_rows, const float* wpe, int B, int T,
                               int C, int vocab_begin, int vocab_rows) override {
    cpu::embedding_shard_forward(out, tokens, wte_rows, wpe, B, T, C, vocab_begin, vocab_rows);
  }
  void embedding_shard_backward(float* dwte_rows, float* dwpe, const float* dout, const int* tokens, int B, int T,
                                int C, int vocab_begin, int vocab_rows) override {
    cpu::embedding_shard_backward(dwte_rows, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_rows);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) override {
    cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N,
                          int C) override {
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd, const float* a,
                                  const float* b, const float* weight, const float* bias, int N, int C) override {
    cpu::residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C);
  }
  void matmul_gelu_forward(float* out, float* pre, const float* inp, const float* weight, const float* bias, int N,
                           int C, int OC) override {
    cpu::matmul_gelu_forward(out, pre, inp, weight, bias, N, C, OC, precision_);
  }
  void matmul_gelu_backward(float* dinp, float* dweight, float* dbias, float* dpre, const float* dout,
                            const float* pre, const float* inp, const float* weight, int N, int C, int OC) override {
    cpu::matmul_gelu_backward(dinp, dweight, dbias, dpre, dout, pre, inp, weight, N, C, OC, precision_);
  }
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                      int OC) override {
    cpu::matmul_forward(out, inp, weight, bias, N, C, OC, precision_);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int C, int OC) override {
    cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, precision_);
  }
  void set_matmul_precision(MatmulPrecision precision) override { precision_ = precision; }
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) override {
    cpu::attention_forward(out, lse, qkv, B, T, C, NH, precision_);
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* out,
                          const float* lse, int B, int T, int C, int NH) override {
    cpu::attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, precision_);
  }
  void gelu_forward(float* out, const float* inp, std::size_t n) override { cpu::gelu_forward(out, inp, n); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) override {
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  void residual_forward(float* out, const float* a, const float* b, std::size_t n) override {
    cpu::residual_forward(out, a, b, n);
  }
  void accumulate(float* y, const float* x, std::size_t n) override { cpu::accumulate(y, x, n); }
  std::uint16_t* alloc_bf16(std::size_t count) override {
    return static_cast<std::uint16_t*>(allocate_zeroed(count * sizeof(std::uint16_t)));
  }
  void to_bf16(std::uint16_t* out, const float* in, std::size_t n) override { cpu::to_bf16(out, in, n); }
  void from_bf16(float* out, const std::uint16_t* in, std::size_t n) override { cpu::from_bf16(out, in, n); }
  void scale(float* x, float factor, std::size_t n) override { cpu::scale(x, factor, n); }
  double sum_of_squares(const float* x, std::size_t n) override { return cpu::sum_of_squares(x, n); }
  void crossentropy_forward(float* losses, const float* logits, const int* targets, int N, int V) override {
    cpu::crossentropy_forward(losses, logits, targets, N, V);
  }
  void crossentropy_backward(float* dlogits, const float* logits, const int* targets, float dloss, int N,
                             int V) override {
    cpu::crossentropy_backward(dlogits, logits, targets, dloss, N, V);
  }
  void crossentropy_shard_max(float* row_max, const float* logits, int N, int V) override {
    cpu::crossentropy_shard_max(row_max, logits, N, V);
  }
  void crossentropy_shard_statistics(float* stats, const float* logits, const int* targets, const float* row_max,
                                     int N, int V, int vocab_begin) override {
    cpu::crossentropy_shard_statistics(stats, logits, targets, row_max, N, V, vocab_begin);
  }
  void crossentropy_shard_backward(float* dlogits, const float* logits, const int* targets, const float* row_max,
                                   const float* stats, float dloss, int N, int V, int vocab_begin) override {
    cpu::crossentropy_shard_backward(dlogits, logits, targets, row_max, stats, dloss, N, V, vocab_begin);
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, int step) override {
    cpu::adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
  }

 private:
  static void copy(void* to, const void* from, std::size_t bytes) {
    if (bytes > 0) std::memcpy(to, from, bytes);
  }

  MatmulPrecision precision_ = MatmulPrecision::fp32;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace geotrain::kernels
