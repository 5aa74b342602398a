// AdamW (decoupled weight decay), one bias-corrected step, CPU twin:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr * ( (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay * p )
// Equal to torch.optim.AdamW's update (which scales p by 1 - lr*wd first and
// folds the bias corrections into the step size); tests/golden checks it.
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "cpu_ops.hpp"
#include "cpu_parallel.hpp"

namespace geotrain::kernels::cpu {

void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int step) {
  if (step < 1) {
    // 1 - beta^0 = 0: the bias correction would divide by zero.
    throw std::invalid_argument("adamw_update: step counts from 1, got " + std::to_string(step));
  }
  // In double: 1 - beta^t cancels for small t, so one float ulp of error in
  // beta^t would become ~1e-4 relative error of the correction at beta = 0.999.
  const float correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), step));
  const float correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), step));
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grads[i];
    const float m_i = beta1 * m[i] + (1.0f - beta1) * g;
    const float v_i = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = m_i;
    v[i] = v_i;
    const float m_hat = m_i / correction1;
    const float v_hat = v_i / correction2;
    params[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * params[i]);
  }
}

}  // namespace geotrain::kernels::cpu
