// AdamW (decoupled weight decay), one bias-corrected step, element-wise:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay * p )
// The bias corrections are computed once on the host in double.
#include <cmath>
#include <stdexcept>
#include <string>

#include "cuda_common.cuh"
#include "cuda_ops.cuh"

namespace geotrain::kernels::cuda {
namespace {

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, std::size_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay, float correction1,
                             float correction2) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    const float g = grads[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / correction1;
    const float v_hat = vi / correction2;
    params[i] -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * params[i]);
  }
}

}  // namespace

void adamw_update(const Context& ctx, float* params, const float* grads, float* m, float* v, std::size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int step) {
  if (step < 1) {
    // As the CPU twin: 1 - beta^0 = 0, the bias correction would divide by zero.
    throw std::invalid_argument("adamw_update: step counts from 1, got " + std::to_string(step));
  }
  if (n == 0) return;
  const auto correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), step));
  const auto correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), step));
  adamw_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, ctx.stream>>>(
      params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, correction1, correction2);
  GT_CUDA_CHECK_LAUNCH();
}

}  // namespace geotrain::kernels::cuda
