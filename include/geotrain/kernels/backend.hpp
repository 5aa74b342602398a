// The compute backend: every op of the GPT model, forward and backward side
// by side, behind one interface. Implementations: CPU (src/kernels/*.cpu.cpp,
// OpenBLAS sgemm + OpenMP loops) and CUDA (src/kernels/*.cu, cuBLAS +
// hand-written kernels). Every op has a CPU twin and a parity test.
//
// Conventions (all row-major, fp32 unless a method says otherwise):
//   B batch (sequences), T sequence length, C channels (hidden), NH heads,
//   V vocabulary, N = B*T rows. Pointers are device pointers of the backend
//   (host memory for the CPU backend). Backward ops ACCUMULATE (+=) into
//   parameter gradients and into activation gradients marked "accumulates";
//   the caller zeroes them once per step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "geotrain/common/run_choices.hpp"

namespace geotrain::kernels {

enum class DeviceKind { cpu, cuda };
using geotrain::MatmulPrecision;  // common/run_choices.hpp

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string description() const = 0;  // e.g. "CPU, OpenBLAS (Haswell), 2 threads"
  // The queue every op of this backend runs on (cudaStream_t for CUDA), so
  // that communication libraries (NCCL) can order their work after it;
  // nullptr for the CPU backend.
  virtual void* native_stream() { return nullptr; }
  // The device's own memory in bytes; 0 where it is the host's (the CPU).
  virtual double device_memory_bytes() const { return 0; }

  // ---- memory
  virtual float* alloc(std::size_t count) = 0;             // zero-initialised
  virtual int* alloc_tokens(std::size_t count) = 0;        // zero-initialised
  virtual void release(void* pointer) = 0;
  virtual void upload(float* device, const float* host, std::size_t count) = 0;
  virtual void upload_tokens(int* device, const int* host, std::size_t count) = 0;
  virtual void download(float* host, const float* device, std::size_t count) = 0;
  virtual void fill_zero(float* device, std::size_t count) = 0;
  virtual void synchronize() = 0;
  // bf16 storage (device.activation_storage = bf16: activations kept for the
  // backward at half the bytes). A value is its 16-bit pattern.
  virtual std::uint16_t* alloc_bf16(std::size_t count) = 0;  // zero-initialised
  // out = in rounded to bf16: nearest, ties to even; a NaN stays a NaN.
  virtual void to_bf16(std::uint16_t* out, const float* in, std::size_t n) = 0;
  // out = the values in holds (exact).
  virtual void from_bf16(float* out, const std::uint16_t* in, std::size_t n) = 0;

  // ---- embedding: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
  virtual void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe,
                                 int B, int T, int C) = 0;
  // dwte, dwpe accumulate.
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens,
                                  int B, int T, int C) = 0;

  // ---- vocabulary-parallel embedding (tensor parallelism): this rank holds
  // rows [vocab_begin, vocab_begin + vocab_rows) of wte as wte_rows[vocab_rows,C].
  //   out[b,t,:] = (tokens[b,t] in the range ? wte_rows[tokens[b,t] - vocab_begin,:] : 0)
  //              + (wpe ? wpe[t,:] : 0)
  // Summed over the ranks of the group (each passing wpe once), this is
  // embedding_forward.
  virtual void embedding_shard_forward(float* out, const int* tokens, const float* wte_rows, const float* wpe,
                                       int B, int T, int C, int vocab_begin, int vocab_rows) = 0;
  // dwte_rows accumulates for the tokens in the range; dwpe (may be null) for all.
  virtual void embedding_shard_backward(float* dwte_rows, float* dwpe, const float* dout, const int* tokens, int B,
                                        int T, int C, int vocab_begin, int vocab_rows) = 0;

  // ---- layernorm over the last dim (eps 1e-5): out = (x-mean)*rstd*weight + bias
  // mean[N], rstd[N] are saved for backward.
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C) = 0;
  // dinp, dweight, dbias accumulate.
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C) = 0;

  // ---- residual + layernorm, fused: residual = a + b; out = layernorm(residual)
  // (as layernorm_forward: mean[N], rstd[N] saved, eps 1e-5). One pass where
  // the separate residual_forward + layernorm_forward read and write the
  // residual stream twice. residual may be a or b (added in place). No fused
  // backward is needed: layernorm_backward already adds into the residual
  // stream's gradient, which is the residual's backward.
  virtual void residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd, const float* a,
                                          const float* b, const float* weight, const float* bias, int N,
                                          int C) = 0;

  // ---- matmul: out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC] (bias may be null)
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                              int N, int C, int OC) = 0;
  // dinp[N,C] accumulates; dweight[OC,C], dbias[OC] accumulate (dbias may be null).
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, int N, int C, int OC) = 0;
  virtual void set_matmul_precision(MatmulPrecision precision) = 0;

  // ---- causal multi-head self-attention, fused (no T x T matrix is stored).
  // qkv[B,T,3C] holds q, k, v (each C = NH heads x C/NH, at most
  // kAttentionMaxHeadSize = 128 channels per head) per token; scale
  // 1/sqrt(C/NH). out[B,T,C]; lse[B,NH,T] = log sum_{t2<=t} exp(scale q_t.k_t2),
  // saved for the backward, which recomputes the probabilities from it.
  virtual void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                                 int NH) = 0;
  // dqkv accumulates; out and lse are the forward's; scratch[B,NH,T].
  virtual void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                  const float* out, const float* lse, int B, int T, int C, int NH) = 0;

  // ---- GELU, tanh approximation (as GPT-2)
  virtual void gelu_forward(float* out, const float* inp, std::size_t n) = 0;
  // dinp accumulates.
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) = 0;

  // ---- matmul + bias + GELU, fused (the MLP's first projection):
  //   pre[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC];  out = gelu(pre)
  // The bias and GELU are one epilogue pass after the GEMM; pre is kept for
  // the backward. bias must not be null.
  virtual void matmul_gelu_forward(float* out, float* pre, const float* inp, const float* weight, const float* bias,
                                   int N, int C, int OC) = 0;
  // dpre[N,OC] = dout * gelu'(pre) is OVERWRITTEN (the caller's scratch) in
  // the same pass that sums dbias; then dinp, dweight as matmul_backward from
  // dpre. dinp, dweight, dbias accumulate.
  virtual void matmul_gelu_backward(float* dinp, float* dweight, float* dbias, float* dpre, const float* dout,
                                    const float* pre, const float* inp, const float* weight, int N, int C,
                                    int OC) = 0;

  // ---- residual: out = a + b (backward: the gradient flows to both unchanged)
  virtual void residual_forward(float* out, const float* a, const float* b, std::size_t n) = 0;
  // y += x
  virtual void accumulate(float* y, const float* x, std::size_t n) = 0;
  // x *= factor
  virtual void scale(float* x, float factor, std::size_t n) = 0;
  // sum of squares of x (for gradient-norm clipping), returned to the host
  virtual double sum_of_squares(const float* x, std::size_t n) = 0;

  // ---- softmax + cross-entropy, fused. logits[N,V] -> losses[N] (per token,
  // natural log). targets[N] in [0, V). Backward: dlogits[N,V] =
  // (softmax(logits) - onehot(target)) * dloss where dloss = 1/(number of
  // tokens in the loss); dlogits is overwritten (not accumulated).
  virtual void crossentropy_forward(float* losses, const float* logits, const int* targets, int N,
                                    int V) = 0;
  virtual void crossentropy_backward(float* dlogits, const float* logits, const int* targets,
                                     float dloss, int N, int V) = 0;

  // ---- vocabulary-parallel softmax + cross-entropy (tensor parallelism):
  // logits[N,V] are this rank's V columns of the vocabulary, global ids
  // vocab_begin .. vocab_begin + V - 1. Three passes around two sums over the
  // group: the row maxima (combined with MAX), then the statistics (combined
  // with SUM), then the gradient.
  //   row_max[N] = max_j logits[row, j]                                (overwrites)
  virtual void crossentropy_shard_max(float* row_max, const float* logits, int N, int V) = 0;
  // With row_max the maximum over the whole vocabulary, stats[N,2] (overwrites):
  //   stats[2 row]     = sum_j exp(logits[row, j] - row_max[row])
  //   stats[2 row + 1] = logits[row, target - vocab_begin] - row_max[row] if this rank holds
  //                      the target, else 0
  // Summed over the group: loss[row] = log(stats[2 row]) - stats[2 row + 1].
  virtual void crossentropy_shard_statistics(float* stats, const float* logits, const int* targets,
                                             const float* row_max, int N, int V, int vocab_begin) = 0;
  // With the summed stats: dlogits[row, j] = (exp(logits[row, j] - row_max[row]) / stats[2 row]
  //   - [vocab_begin + j == target]) * dloss                           (overwrites)
  virtual void crossentropy_shard_backward(float* dlogits, const float* logits, const int* targets,
                                           const float* row_max, const float* stats, float dloss, int N, int V,
                                           int vocab_begin) = 0;

  // ---- AdamW (decoupled weight decay), one step, bias-corrected:
  // m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  // p -= lr * ( (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + weight_decay * p )
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t n,
                            float lr, float beta1, float beta2, float eps, float weight_decay,
                            int step) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();
// Throws geotrain::RunError with a clear message if the CUDA backend was not
// compiled in or no GPU is usable.
std::unique_ptr<Backend> make_cuda_backend();
// automatic: CUDA if compiled and a GPU is usable, else the CPU.
std::unique_ptr<Backend> make_backend(DeviceRequest device);
bool cuda_compiled();

}  // namespace geotrain::kernels
