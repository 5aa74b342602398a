// Choosing a backend by name: "cpu", "cuda" or "auto".
#include <memory>
#include <string>

#include "geotrain/common/check.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/kernels/backend.hpp"
#ifdef GEOTRAIN_HAVE_CUDA
#include "cuda_backend.hpp"
#endif

namespace geotrain::kernels {

bool cuda_compiled() {
#ifdef GEOTRAIN_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_cuda_backend() {
#ifdef GEOTRAIN_HAVE_CUDA
  return create_cuda_backend();
#else
  throw geotrain::RunError(
      "device = cuda: this geotrain was built without the CUDA backend (configure with the cuda preset)");
#endif
}

std::unique_ptr<Backend> make_backend(DeviceRequest device) {
  if (device == DeviceRequest::cpu) return make_cpu_backend();
  if (device == DeviceRequest::cuda) return make_cuda_backend();
  // A CUDA build on a machine without a usable GPU falls back to the CPU;
  // the chosen backend's description() tells the user which one runs.
  if (cuda_compiled()) {
    try {
      const ThrowFailedCalls recoverable;
      return make_cuda_backend();
    } catch (const geotrain::RunError&) {
    }
  }
  return make_cpu_backend();
}

}  // namespace geotrain::kernels
