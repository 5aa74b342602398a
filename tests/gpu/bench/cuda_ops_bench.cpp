// Per-op timings of the CUDA backend at GPT-2 124M shapes (B = 8, T = 1024,
// C = 768, 12 heads, V = 50257), forward and backward, fp32 and bf16 GEMMs:
// the median of 10 timed calls after 2 warm-up calls, each call bracketed by
// synchronize(). GEMM-bound ops report TFLOPS; the fused attention counts
// the causal half of its products (forward 2 B T^2 C: q k^T and p v over
// t2 <= t; backward twice that, without the recomputation of p), the
// convention of FlashAttention's and llm.c's reports. The others report GB/s
// of the tensors they must read and write at least once.
//
//   geotrain_cuda_bench [--batch 8] [--reps 10] [--csv FILE]
//
// Exits 2 when no GPU is usable (the message says why).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/kernels/backend.hpp"

namespace {

using geotrain::kernels::Backend;
using geotrain::kernels::MatmulPrecision;

struct Row {
  std::string op, precision;
  double ms, rate;
  const char* unit;
};

class Bench {
 public:
  Bench(Backend& k, int reps) : k_(k), reps_(reps) {}

  float* random(std::size_t n, float range) {
    std::vector<float> host(n);
    std::mt19937 generator(static_cast<unsigned>(n));
    std::uniform_real_distribution<float> distribution(-range, range);
    for (float& v : host) v = distribution(generator);
    float* p = k_.alloc(n);
    k_.upload(p, host.data(), n);
    buffers_.push_back(p);
    return p;
  }
  float* zeros(std::size_t n) {
    float* p = k_.alloc(n);
    buffers_.push_back(p);
    return p;
  }
  int* tokens(std::size_t n, int high) {
    std::vector<int> host(n);
    std::mt19937 generator(7);
    std::uniform_int_distribution<int> distribution(0, high - 1);
    for (int& v : host) v = distribution(generator);
    int* p = k_.alloc_tokens(n);
    k_.upload_tokens(p, host.data(), n);
    tokens_.push_back(p);
    return p;
  }
  ~Bench() {
    for (float* p : buffers_) k_.release(p);
    for (int* p : tokens_) k_.release(p);
  }

  // Median milliseconds of one call of `body`.
  double time_ms(const std::function<void()>& body) {
    for (int i = 0; i < 2; ++i) body();
    k_.synchronize();
    std::vector<double> ms;
    for (int i = 0; i < reps_; ++i) {
      const auto start = std::chrono::steady_clock::now();
      body();
      k_.synchronize();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

  void flops(const std::string& op, const std::string& precision, double flop, const std::function<void()>& body) {
    const double ms = time_ms(body);
    add({op, precision, ms, flop / (ms * 1e-3) / 1e12, "TFLOPS"});
  }
  void bytes(const std::string& op, double byte_count, const std::function<void()>& body) {
    const double ms = time_ms(body);
    add({op, "fp32", ms, byte_count / (ms * 1e-3) / 1e9, "GB/s"});
  }
  const std::vector<Row>& rows() const { return rows_; }

 private:
  void add(const Row& row) {
    std::printf("%-34s %-5s %10.3f ms %10.1f %s\n", row.op.c_str(), row.precision.c_str(), row.ms, row.rate,
                row.unit);
    std::fflush(stdout);
    rows_.push_back(row);
  }
  Backend& k_;
  int reps_;
  std::vector<float*> buffers_;
  std::vector<int*> tokens_;
  std::vector<Row> rows_;
};

}  // namespace

int main(int argc, char** argv) {
  int B = 8, reps = 10;
  std::string csv;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--batch" && i + 1 < argc) {
      B = std::atoi(argv[++i]);
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (arg == "--csv" && i + 1 < argc) {
      csv = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--batch 8] [--reps 10] [--csv FILE]\n", argv[0]);
      return 2;
    }
  }
  if (B < 1 || reps < 1) {
    std::fprintf(stderr, "--batch and --reps must be >= 1\n");
    return 2;
  }
  std::unique_ptr<Backend> backend;
  try {
    backend = geotrain::kernels::make_cuda_backend();
  } catch (const geotrain::RunError& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 2;
  }
  Backend& k = *backend;
  const int T = 1024, C = 768, NH = 12, V = 50257;
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const double f = sizeof(float);
  std::printf("%s\nGPT-2 124M shapes: B %d, T %d, C %d, NH %d, V %d; median of %d calls\n\n",
              k.description().c_str(), B, T, C, NH, V, reps);

  Bench bench(k, reps);
  int* tokens = bench.tokens(N, V);
  float* wte = bench.random(static_cast<std::size_t>(V) * C, 0.02f);
  float* wpe = bench.random(static_cast<std::size_t>(T) * C, 0.02f);
  float* x = bench.random(NC, 1.0f);
  float* dx = bench.random(NC, 1.0f);
  float* y = bench.zeros(NC);
  float* dy = bench.zeros(NC);
  float* dwte = bench.zeros(static_cast<std::size_t>(V) * C);
  float* dwpe = bench.zeros(static_cast<std::size_t>(T) * C);
  float* weight = bench.random(C, 1.0f);
  float* bias = bench.random(C, 0.1f);
  float* dweight = bench.zeros(C);
  float* dbias = bench.zeros(C);
  float* mean = bench.zeros(N);
  float* rstd = bench.zeros(N);

  bench.bytes("embedding_forward", 2.0 * NC * f,
              [&] { k.embedding_forward(y, tokens, wte, wpe, B, T, C); });
  bench.bytes("embedding_backward", 2.0 * NC * f, [&] { k.embedding_backward(dwte, dwpe, dx, tokens, B, T, C); });
  // One rank of a 2-way vocabulary-parallel group: the first half of wte's rows.
  const int V_shard = (V + 1) / 2;
  bench.bytes("embedding_shard_forward (V/2)", 2.0 * NC * f,
              [&] { k.embedding_shard_forward(y, tokens, wte, wpe, B, T, C, 0, V_shard); });
  bench.bytes("embedding_shard_backward (V/2)", 2.0 * NC * f,
              [&] { k.embedding_shard_backward(dwte, dwpe, dx, tokens, B, T, C, 0, V_shard); });
  bench.bytes("layernorm_forward", 2.0 * NC * f,
              [&] { k.layernorm_forward(y, mean, rstd, x, weight, bias, N, C); });
  bench.bytes("layernorm_backward", 3.0 * NC * f,
              [&] { k.layernorm_backward(dy, dweight, dbias, dx, x, weight, mean, rstd, N, C); });

  const std::size_t N4C = 4 * NC;
  float* h = bench.random(N4C, 2.0f);
  float* dh = bench.random(N4C, 1.0f);
  float* g = bench.zeros(N4C);
  bench.bytes("gelu_forward (N x 4C)", 2.0 * N4C * f, [&] { k.gelu_forward(g, h, N4C); });
  bench.bytes("gelu_backward (N x 4C)", 3.0 * N4C * f, [&] { k.gelu_backward(g, h, dh, N4C); });
  bench.bytes("residual_forward", 3.0 * NC * f, [&] { k.residual_forward(y, x, dx, NC); });
  // Fused: reads a, b, writes the residual and the normalised output (the
  // separate pair moves 3 + 2 N x C).
  bench.bytes("residual_layernorm_forward (fused)", 4.0 * NC * f,
              [&] { k.residual_layernorm_forward(dy, y, mean, rstd, x, dx, weight, bias, N, C); });
  bench.bytes("accumulate", 3.0 * NC * f, [&] { k.accumulate(y, x, NC); });

  struct Layer {
    const char* name;
    int in, out;
    bool bias;
  };
  const Layer layers[] = {{"attn.qkv", C, 3 * C, true},
                          {"attn.proj", C, C, true},
                          {"mlp.fc", C, 4 * C, true},
                          {"mlp.proj", 4 * C, C, true},
                          {"lm_head", C, V, false}};
  for (const MatmulPrecision precision : {MatmulPrecision::fp32, MatmulPrecision::bf16}) {
    k.set_matmul_precision(precision);
    const std::string p = precision == MatmulPrecision::bf16 ? "bf16" : "fp32";
    for (const Layer& layer : layers) {
      float* inp = bench.random(static_cast<std::size_t>(N) * layer.in, 1.0f);
      float* w = bench.random(static_cast<std::size_t>(layer.out) * layer.in, 0.02f);
      float* b = layer.bias ? bench.random(layer.out, 0.1f) : nullptr;
      float* out = bench.zeros(static_cast<std::size_t>(N) * layer.out);
      float* dinp = bench.zeros(static_cast<std::size_t>(N) * layer.in);
      float* dw = bench.zeros(static_cast<std::size_t>(layer.out) * layer.in);
      float* db = layer.bias ? bench.zeros(layer.out) : nullptr;
      const double flop = 2.0 * N * layer.in * layer.out;
      const std::string name = std::string("matmul ") + layer.name + " " + std::to_string(layer.in) + "->" +
                               std::to_string(layer.out);
      bench.flops(name + " fwd", p, flop, [&] { k.matmul_forward(out, inp, w, b, N, layer.in, layer.out); });
      bench.flops(name + " bwd", p, 2 * flop,
                  [&] { k.matmul_backward(dinp, dw, db, out, inp, w, N, layer.in, layer.out); });
    }
    {  // mlp.fc with its bias + GELU epilogue (and the fused dGELU + bias gradient)
      float* inp = bench.random(NC, 1.0f);
      float* w = bench.random(4 * static_cast<std::size_t>(C) * C, 0.02f);
      float* b = bench.random(4 * static_cast<std::size_t>(C), 0.1f);
      float* out = bench.zeros(N4C);
      float* pre = bench.zeros(N4C);
      float* dpre = bench.zeros(N4C);
      float* dinp = bench.zeros(NC);
      float* dw = bench.zeros(4 * static_cast<std::size_t>(C) * C);
      float* db = bench.zeros(4 * static_cast<std::size_t>(C));
      const double flop = 2.0 * N * C * 4.0 * C;
      bench.flops("matmul+gelu mlp.fc (fused) fwd", p, flop,
                  [&] { k.matmul_gelu_forward(out, pre, inp, w, b, N, C, 4 * C); });
      bench.flops("matmul+gelu mlp.fc (fused) bwd", p, 2 * flop,
                  [&] { k.matmul_gelu_backward(dinp, dw, db, dpre, h, pre, inp, w, N, C, 4 * C); });
    }
    float* qkv = bench.random(3 * NC, 1.0f);
    float* dqkv = bench.zeros(3 * NC);
    const std::size_t lse_size = static_cast<std::size_t>(B) * NH * T;
    float* lse = bench.zeros(lse_size);
    float* scratch = bench.zeros(lse_size);
    const double attention_flop = 2.0 * B * static_cast<double>(T) * T * C;  // two causal T x T products
    bench.flops("attention fwd (fused)", p, attention_flop, [&] { k.attention_forward(y, lse, qkv, B, T, C, NH); });
    bench.flops("attention bwd (fused)", p, 2 * attention_flop,
                [&] { k.attention_backward(dqkv, scratch, dx, qkv, y, lse, B, T, C, NH); });
  }
  k.set_matmul_precision(MatmulPrecision::fp32);

  const std::size_t NV = static_cast<std::size_t>(N) * V;
  float* logits = bench.random(NV, 5.0f);
  float* dlogits = bench.zeros(NV);
  float* losses = bench.zeros(N);
  int* targets = bench.tokens(N, V);
  bench.bytes("crossentropy_forward (N x V)", NV * f,
              [&] { k.crossentropy_forward(losses, logits, targets, N, V); });
  bench.bytes("crossentropy_backward (N x V)", 2.0 * NV * f,
              [&] { k.crossentropy_backward(dlogits, logits, targets, 1.0f / N, N, V); });
  // The three passes of one rank of a 2-way vocabulary-parallel group
  // (logits[N, V/2]: the first N * V/2 values).
  const std::size_t NV_shard = static_cast<std::size_t>(N) * V_shard;
  float* row_max = bench.zeros(N);
  float* stats = bench.zeros(2 * static_cast<std::size_t>(N));
  k.crossentropy_shard_max(row_max, logits, N, V_shard);
  k.crossentropy_shard_statistics(stats, logits, targets, row_max, N, V_shard, 0);
  bench.bytes("crossentropy_shard_max (N x V/2)", NV_shard * f,
              [&] { k.crossentropy_shard_max(row_max, logits, N, V_shard); });
  bench.bytes("crossentropy_shard_statistics (N x V/2)", NV_shard * f,
              [&] { k.crossentropy_shard_statistics(stats, logits, targets, row_max, N, V_shard, 0); });
  bench.bytes("crossentropy_shard_backward (N x V/2)", 2.0 * NV_shard * f, [&] {
    k.crossentropy_shard_backward(dlogits, logits, targets, row_max, stats, 1.0f / N, N, V_shard, 0);
  });

  const std::size_t P = 124'439'808;  // GPT-2 124M parameters
  float* params = bench.random(P, 0.02f);
  float* grads = bench.random(P, 0.01f);
  float* m = bench.zeros(P);
  float* v = bench.zeros(P);
  int step = 0;
  bench.bytes("adamw_update (124M)", 7.0 * P * f,
              [&] { k.adamw_update(params, grads, m, v, P, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step); });
  bench.bytes("sum_of_squares (124M)", 1.0 * P * f, [&] { (void)k.sum_of_squares(grads, P); });
  bench.bytes("scale (124M)", 2.0 * P * f, [&] { k.scale(grads, 1.0f, P); });

  if (!csv.empty()) {
    std::FILE* file = std::fopen(csv.c_str(), "w");
    if (file == nullptr) {
      std::fprintf(stderr, "cannot write %s: %s\n", csv.c_str(), std::strerror(errno));
      return 1;
    }
    std::fprintf(file, "op,precision,ms,rate,unit\n");
    for (const Row& row : bench.rows()) {
      std::fprintf(file, "%s,%s,%.4f,%.2f,%s\n", row.op.c_str(), row.precision.c_str(), row.ms, row.rate, row.unit);
    }
    std::fclose(file);
  }
  return 0;
}
