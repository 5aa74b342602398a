// CPU kernel benchmark: the backend's matmul forward + backward on the
// GPT-2 124M shapes against the same three cblas_sgemm calls issued directly
// (sgemm's own throughput: the ceiling our op can reach), then one whole
// transformer block, where the OpenMP and OpenBLAS thread pools take turns.
// Runs in ~20-40 s on 2 cores.
//
//   build/release/bench/bench_kernels [--tokens 1024] [--reps 5]
//   OPENBLAS_THREAD_TIMEOUT=4 OMP_WAIT_POLICY=passive build/release/bench/bench_kernels
//
// OpenBLAS picks its kernels from OPENBLAS_CORETYPE when set (this project's
// machines set Haswell = AVX2); unset it in the command to let it detect the
// CPU (AVX-512 where present). Compare numbers only under the same setting.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cpu_blas.hpp"
#include "geotrain/kernels/backend.hpp"

using namespace geotrain;

namespace {

constexpr int kChannels = 768;  // GPT-2 124M hidden size

struct Shape {
  const char* layer;
  int OC;
  bool bias;
};
// The four GEMM shapes of a GPT-2 124M layer with inputs of width C = 768,
// and the tied LM head (vocabulary 50257 padded to a multiple of 128).
const Shape kShapes[] = {{"attn.qkv", 3 * kChannels, true},
                         {"attn.proj", kChannels, true},
                         {"mlp.fc", 4 * kChannels, true},
                         {"lm_head (tied wte)", 50304, false}};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Shortest wall time of `reps` calls after one warm-up call: the machine
// may be shared, and other processes only ever add time.
double best_seconds(int reps, const std::function<void()>& body) {
  body();
  double best = 0.0;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    const double elapsed = seconds_since(start);
    best = i == 0 ? elapsed : std::min(best, elapsed);
  }
  return best;
}

// Host buffers of one shape, shared by both contenders; the backend's
// pointers are host pointers on the CPU, so no copies are timed.
struct Buffers {
  std::vector<float> inp, weight, bias, out, dout, dinp, dweight, dbias;
  Buffers(int N, int C, int OC) {
    std::mt19937 engine(1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    auto random = [&](std::size_t n) {
      std::vector<float> v(n);
      for (float& x : v) x = normal(engine);
      return v;
    };
    inp = random(static_cast<std::size_t>(N) * C);
    weight = random(static_cast<std::size_t>(OC) * C);
    bias = random(OC);
    dout = random(static_cast<std::size_t>(N) * OC);
    out.assign(static_cast<std::size_t>(N) * OC, 0.0f);
    dinp.assign(static_cast<std::size_t>(N) * C, 0.0f);
    dweight.assign(static_cast<std::size_t>(OC) * C, 0.0f);
    dbias.assign(OC, 0.0f);
  }
};

void direct_sgemm(Buffers& b, int N, int C, int OC) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, b.inp.data(), C, b.weight.data(), C, 0.0f,
              b.out.data(), OC);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, b.dout.data(), OC, b.weight.data(), C,
              1.0f, b.dinp.data(), C);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, b.dout.data(), OC, b.inp.data(), C, 1.0f,
              b.dweight.data(), C);
}

void backend_matmul(kernels::Backend& k, Buffers& b, const Shape& s, int N, int C) {
  const float* bias = s.bias ? b.bias.data() : nullptr;
  float* dbias = s.bias ? b.dbias.data() : nullptr;
  k.matmul_forward(b.out.data(), b.inp.data(), b.weight.data(), bias, N, C, s.OC);
  k.matmul_backward(b.dinp.data(), b.dweight.data(), dbias, b.dout.data(), b.inp.data(), b.weight.data(), N, C,
                    s.OC);
}

void matmul_table(kernels::Backend& k, int N, int reps) {
  std::printf("\n## matmul forward + backward, fp32, N = %d tokens, C = %d\n\n", N, kChannels);
  std::printf("FLOPs per iteration: 3 GEMMs x 2*N*C*OC (the bias work is not counted).\n\n");
  std::printf("| layer | OC | GFLOP | ours (ms) | sgemm x3 (ms) | ours GFLOPS | sgemm GFLOPS | ours / sgemm |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const Shape& s : kShapes) {
    Buffers b(N, kChannels, s.OC);
    const double flop = 3.0 * 2.0 * N * kChannels * s.OC;
    // Fewer repetitions for the LM head: one iteration is ~1 s on 2 cores.
    const int shape_reps = s.OC > 10000 ? std::max(1, reps / 3) : reps;
    const double ours = best_seconds(shape_reps, [&] { backend_matmul(k, b, s, N, kChannels); });
    const double peer = best_seconds(shape_reps, [&] { direct_sgemm(b, N, kChannels, s.OC); });
    std::printf("| %s | %d | %.1f | %.1f | %.1f | %.0f | %.0f | %.3f |\n", s.layer, s.OC, flop * 1e-9, ours * 1e3,
                peer * 1e3, flop / ours * 1e-9, flop / peer * 1e-9, peer / ours);
  }
}

// One transformer block, forward and backward, through the backend: the
// op sequence of a GPT-2 layer, where OpenBLAS's pool (the four matmuls) and
// OpenMP's (everything else) take turns. Its time, set against the matmuls'
// share, shows what the non-GEMM ops and the hand-overs between the pools
// cost. Compare runs with OPENBLAS_NUM_THREADS=1, or with
// OPENBLAS_THREAD_TIMEOUT=4 OMP_WAIT_POLICY=passive (idle threads sleep at
// once instead of spinning), to see the hand-over share.
struct BlockSize {
  const char* name;
  int B, T, C, NH;
};
const BlockSize kBlocks[] = {{"tiny (h=128)", 8, 128, 128, 4}, {"gpt2-124m", 4, 256, 768, 12}};

class Block {
 public:
  // fused: the residual adds fused with the layernorms after them and fc with
  // its bias + GELU, as the model runs (src/model/gpt_stage.cpp); in a stack
  // of blocks ln1 comes from the previous block's last add, so the fused
  // block does not compute it and normalises its own output for the next.
  Block(kernels::Backend& k, const BlockSize& size, bool fused)
      : k_(k), B_(size.B), T_(size.T), C_(size.C), NH_(size.NH), fused_(fused) {
    const std::size_t N = static_cast<std::size_t>(B_) * T_, C = C_;
    for (auto* p : {&x_, &ln1_, &att_out_, &r2_, &ln2_, &out_, &dout_, &dx_, &dln_, &datt_out_, &dr2_, &ln_next_}) {
      *p = alloc(N * C);
    }
    for (auto* p : {&qkv_, &dqkv_}) *p = alloc(N * 3 * C);
    for (auto* p : {&fc_, &gelu_, &dfc_, &dgelu_}) *p = alloc(N * 4 * C);
    for (auto* p : {&mean1_, &rstd1_, &mean2_, &rstd2_, &mean_next_, &rstd_next_}) *p = alloc(N);
    lse_ = alloc(static_cast<std::size_t>(B_) * NH_ * T_);
    attention_scratch_ = alloc(static_cast<std::size_t>(B_) * NH_ * T_);
    std::mt19937 engine(2);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (std::size_t i = 0; i < N * C; ++i) x_[i] = normal(engine);
    for (std::size_t i = 0; i < N * C; ++i) dout_[i] = normal(engine) * 0.01f;
    w_ = alloc(12 * C * C + 13 * C);  // the layer's parameters, packed
    dw_ = alloc(12 * C * C + 13 * C);
    for (std::size_t i = 0; i < 12 * C * C + 13 * C; ++i) w_[i] = normal(engine) * 0.04f;
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  ~Block() {
    for (float* p : owned_) k_.release(p);
  }

  // The FLOPs the recipes count per token per layer: 72 C^2 (weights,
  // forward + backward) + 12 C T (attention).
  double flop() const {
    const double C = C_;
    return static_cast<double>(B_) * T_ * (72.0 * C * C + 12.0 * C * T_);
  }
  double matmul_flop() const { return static_cast<double>(B_) * T_ * 72.0 * C_ * C_; }

  void step() {
    forward();
    backward();
  }

 private:
  float* alloc(std::size_t n) {
    owned_.push_back(k_.alloc(n));
    return owned_.back();
  }
  // Parameter views into w_ / dw_: [qkv.w | proj.w | fc.w | fcproj.w | biases and layernorm vectors].
  float* param(float* base, int which) const {
    const std::size_t C = C_;
    const std::size_t offsets[] = {0, 3 * C * C, 4 * C * C, 8 * C * C,              // matrices
                                   12 * C * C, 12 * C * C + 3 * C, 12 * C * C + 4 * C,  // qkv.b proj.b fc.b
                                   12 * C * C + 8 * C, 12 * C * C + 9 * C, 12 * C * C + 10 * C,  // fcproj.b ln1.w ln1.b
                                   12 * C * C + 11 * C, 12 * C * C + 12 * C};                  // ln2.w ln2.b
    return base + offsets[which];
  }
  void forward() {
    const int N = B_ * T_, C = C_;
    const std::size_t NC = static_cast<std::size_t>(N) * C;
    if (!fused_) k_.layernorm_forward(ln1_, mean1_, rstd1_, x_, param(w_, 8), param(w_, 9), N, C);
    k_.matmul_forward(qkv_, ln1_, param(w_, 0), param(w_, 4), N, C, 3 * C);
    k_.attention_forward(att_out_, lse_, qkv_, B_, T_, C, NH_);
    k_.matmul_forward(r2_, att_out_, param(w_, 1), param(w_, 5), N, C, C);
    if (fused_) {
      k_.residual_layernorm_forward(r2_, ln2_, mean2_, rstd2_, r2_, x_, param(w_, 10), param(w_, 11), N, C);
      k_.matmul_gelu_forward(gelu_, fc_, ln2_, param(w_, 2), param(w_, 6), N, C, 4 * C);
      k_.matmul_forward(out_, gelu_, param(w_, 3), param(w_, 7), N, 4 * C, C);
      k_.residual_layernorm_forward(out_, ln_next_, mean_next_, rstd_next_, out_, r2_, param(w_, 8), param(w_, 9), N,
                                    C);
      return;
    }
    k_.accumulate(r2_, x_, NC);
    k_.layernorm_forward(ln2_, mean2_, rstd2_, r2_, param(w_, 10), param(w_, 11), N, C);
    k_.matmul_forward(fc_, ln2_, param(w_, 2), param(w_, 6), N, C, 4 * C);
    k_.gelu_forward(gelu_, fc_, 4 * NC);
    k_.matmul_forward(out_, gelu_, param(w_, 3), param(w_, 7), N, 4 * C, C);
    k_.accumulate(out_, r2_, NC);
  }
  void backward() {
    const int N = B_ * T_, C = C_;
    const std::size_t NC = static_cast<std::size_t>(N) * C;
    k_.fill_zero(dr2_, NC);
    k_.accumulate(dr2_, dout_, NC);
    k_.fill_zero(dgelu_, 4 * NC);
    k_.matmul_backward(dgelu_, param(dw_, 3), param(dw_, 7), dout_, gelu_, param(w_, 3), N, 4 * C, C);
    k_.fill_zero(dln_, NC);
    if (fused_) {
      k_.matmul_gelu_backward(dln_, param(dw_, 2), param(dw_, 6), dfc_, dgelu_, fc_, ln2_, param(w_, 2), N, C, 4 * C);
    } else {
      k_.fill_zero(dfc_, 4 * NC);
      k_.gelu_backward(dfc_, fc_, dgelu_, 4 * NC);
      k_.matmul_backward(dln_, param(dw_, 2), param(dw_, 6), dfc_, ln2_, param(w_, 2), N, C, 4 * C);
    }
    k_.layernorm_backward(dr2_, param(dw_, 10), param(dw_, 11), dln_, r2_, param(w_, 10), mean2_, rstd2_, N, C);
    k_.fill_zero(datt_out_, NC);
    k_.matmul_backward(datt_out_, param(dw_, 1), param(dw_, 5), dr2_, att_out_, param(w_, 1), N, C, C);
    k_.fill_zero(dqkv_, 3 * NC);
    k_.attention_backward(dqkv_, attention_scratch_, datt_out_, qkv_, att_out_, lse_, B_, T_, C, NH_);
    k_.fill_zero(dln_, NC);
    k_.matmul_backward(dln_, param(dw_, 0), param(dw_, 4), dqkv_, ln1_, param(w_, 0), N, C, 3 * C);
    k_.fill_zero(dx_, NC);
    k_.accumulate(dx_, dr2_, NC);
    k_.layernorm_backward(dx_, param(dw_, 8), param(dw_, 9), dln_, x_, param(w_, 8), mean1_, rstd1_, N, C);
  }

  kernels::Backend& k_;
  int B_, T_, C_, NH_;
  bool fused_;
  float *ln_next_, *mean_next_, *rstd_next_;
  std::vector<float*> owned_;
  float *x_, *ln1_, *att_out_, *r2_, *ln2_, *out_, *dout_, *dx_, *dln_, *datt_out_, *dr2_;
  float *qkv_, *dqkv_, *fc_, *gelu_, *dfc_, *dgelu_, *mean1_, *rstd1_, *mean2_, *rstd2_, *lse_, *attention_scratch_;
  float *w_, *dw_;
};

void block_table(kernels::Backend& k, int reps) {
  std::printf("\n## one transformer block, forward + backward, fp32\n\n");
  std::printf("FLOPs as in the recipes: per token 72 C^2 + 12 C T; the last column is the share of them\n"
              "in the block's four matmuls. Time beyond those at the matmul table's rate is the other ops\n"
              "and the hand-overs between the two thread pools.\n\n");
  std::printf("Each block twice: the separate ops, and the fused residual + layernorm and matmul + bias + GELU\n"
              "the model runs; the two are timed in alternation, best of each.\n\n");
  std::printf("| block | ops | B x T | C | ms per step | GFLOPS | tokens/s | matmul share of the FLOPs |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const BlockSize& size : kBlocks) {
    Block separate(k, size, false), fused(k, size, true);
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < reps; ++r) {
      best[0] = std::min(best[0], best_seconds(1, [&] { separate.step(); }));
      best[1] = std::min(best[1], best_seconds(1, [&] { fused.step(); }));
    }
    for (const Block* block : {&separate, &fused}) {
      const double seconds = best[block == &fused];
      std::printf("| %s | %s | %d x %d | %d | %.1f | %.0f | %.0f | %.0f%% |\n", size.name,
                  block == &fused ? "fused" : "separate", size.B, size.T, size.C, seconds * 1e3,
                  block->flop() / seconds * 1e-9, size.B * size.T / seconds, block->matmul_flop() / block->flop() * 100.0);
    }
  }
}

const char* env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

int int_option(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int N = int_option(argc, argv, "--tokens", 4 * 256);
  const int reps = int_option(argc, argv, "--reps", 5);
  if (N <= 0 || reps <= 0) {
    std::fprintf(stderr, "bench_kernels: --tokens and --reps must be > 0\n");
    return 2;
  }
  const auto backend = kernels::make_cpu_backend();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const std::string core = kernels::cpu::blas_core_name();
  std::printf("# bench_kernels\n\n");
  std::printf("- backend: %s\n", backend->description().c_str());
  std::printf("- OpenBLAS core in force: %s; OPENBLAS_CORETYPE=%s\n", core.empty() ? "(not OpenBLAS)" : core.c_str(),
              coretype != nullptr ? coretype : "(unset: detected from the CPU)");
  std::printf("- threads: OpenBLAS %d, OpenMP %d\n", kernels::cpu::blas_thread_count(), omp_get_max_threads());
  std::printf("- idle threads: OPENBLAS_THREAD_TIMEOUT=%s, OMP_WAIT_POLICY=%s\n",
              env_or("OPENBLAS_THREAD_TIMEOUT", "(unset: spin ~2^28 cycles)"),
              env_or("OMP_WAIT_POLICY", "(unset: spin, then sleep)"));
  matmul_table(*backend, N, reps);
  block_table(*backend, reps);
  return 0;
}
