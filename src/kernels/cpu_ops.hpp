// Internal: the CPU twins of the Backend ops, one file per op
// (<op>.cpu.cpp, forward and backward side by side). The semantics - shapes,
// row-major layout, which outputs accumulate - are those documented in
// include/geotrain/kernels/backend.hpp; CpuBackend (cpu_backend.cpp) forwards
// to these functions and the CUDA kernels are tested against the same golden
// tensors.
//
// Threading: the non-GEMM ops are OpenMP parallel-for loops over rows, tokens,
// (batch, head) pairs or column blocks; matmul leaves threading to OpenBLAS.
// No function calls BLAS from inside an OpenMP region (see cpu_backend.cpp).
// Every OpenMP op gives bit-identical results for any OMP_NUM_THREADS: each
// output element is computed by one thread in a fixed order.
#pragma once
#include <cstddef>

#include "geotrain/kernels/backend.hpp"

namespace geotrain::kernels::cpu {

// embedding.cpu.cpp
void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T,
                       int C);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T,
                        int C);

// layernorm.cpu.cpp
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C);

// layernorm.cpu.cpp: residual = a + b (residual may alias a or b), then the layernorm of it.
void residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd, const float* a,
                                const float* b, const float* weight, const float* bias, int N, int C);

// matmul.cpu.cpp. With MatmulPrecision::bf16 the GEMM operands are rounded
// to bf16 (round to nearest even) before an fp32 sgemm: an emulation of bf16
// tensor cores with fp32 accumulation, for parity tests only (it costs copies
// and is no faster).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                    int OC, MatmulPrecision precision);
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, MatmulPrecision precision);

// attention.cpu.cpp: the tiled algorithm of attention.cu. With
// MatmulPrecision::bf16 the operands of its products are rounded to bf16, as
// on the GPU. Throws std::invalid_argument for a head size above
// kAttentionMaxHeadSize.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                       MatmulPrecision precision);
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH, MatmulPrecision precision);

// gelu.cpu.cpp
void gelu_forward(float* out, const float* inp, std::size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n);
// gelu.cpu.cpp too: the GEMM of matmul.cpu.cpp with the bias + GELU epilogue.
// Throws std::invalid_argument for a null bias.
void matmul_gelu_forward(float* out, float* pre, const float* inp, const float* weight, const float* bias, int N,
                         int C, int OC, MatmulPrecision precision);
void matmul_gelu_backward(float* dinp, float* dweight, float* dbias, float* dpre, const float* dout,
                          const float* pre, const float* inp, const float* weight, int N, int C, int OC,
                          MatmulPrecision precision);

// residual.cpu.cpp
void residual_forward(float* out, const float* a, const float* b, std::size_t n);
void accumulate(float* y, const float* x, std::size_t n);
void scale(float* x, float factor, std::size_t n);
double sum_of_squares(const float* x, std::size_t n);

// bf16_storage.cpu.cpp
void to_bf16(std::uint16_t* out, const float* in, std::size_t n);
void from_bf16(float* out, const std::uint16_t* in, std::size_t n);

// embedding.cpu.cpp: one rank's rows of a vocabulary-parallel wte (backend.hpp).
void embedding_shard_forward(float* out, const int* tokens, const float* wte_rows, const float* wpe, int B, int T,
                             int C, int vocab_begin, int vocab_rows);
void embedding_shard_backward(float* dwte_rows, float* dwpe, const float* dout, const int* tokens, int B, int T,
                              int C, int vocab_begin, int vocab_rows);

// crossentropy.cpu.cpp: the vocabulary-parallel passes (backend.hpp).
void crossentropy_shard_max(float* row_max, const float* logits, int N, int V);
void crossentropy_shard_statistics(float* stats, const float* logits, const int* targets, const float* row_max,
                                   int N, int V, int vocab_begin);
void crossentropy_shard_backward(float* dlogits, const float* logits, const int* targets, const float* row_max,
                                 const float* stats, float dloss, int N, int V, int vocab_begin);

// crossentropy.cpu.cpp. Throws geotrain::RunError for a target outside [0, V).
void crossentropy_forward(float* losses, const float* logits, const int* targets, int N, int V);
void crossentropy_backward(float* dlogits, const float* logits, const int* targets, float dloss, int N,
                           int V);

// adamw.cpu.cpp. Throws std::invalid_argument for step < 1.
void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int step);

}  // namespace geotrain::kernels::cpu
