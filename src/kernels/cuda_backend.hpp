// Internal: the seam between the backend factory (backend_factory.cpp, always
// compiled) and the CUDA backend (cuda_backend.cu, compiled only with
// GEOTRAIN_CUDA). Plain C++17 so that nvcc can include it.
#pragma once
#include <memory>

#include "geotrain/kernels/backend.hpp"

namespace geotrain::kernels {

// Creates the CUDA backend on the current device. Throws geotrain::RunError,
// with the CUDA error string, when no GPU is usable (no driver, no device,
// out of memory). Defined in cuda_backend.cu.
std::unique_ptr<Backend> create_cuda_backend();

}  // namespace geotrain::kernels
