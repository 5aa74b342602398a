#include <cuda_runtime.h>

#include <string>

#include "geotrain/device/device_info.hpp"

namespace geotrain::device {

DeviceInfo query_devices() {
  DeviceInfo info;
  info.cuda_compiled = true;
  int count = 0;
  // Without a driver this returns cudaErrorInsufficientDriver, not
  // cudaErrorNoDevice: treat any failure like a count of zero.
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    info.description = std::string("CUDA backend compiled, no usable GPU (") +
                       cudaGetErrorString(status) + "): using the CPU";
    return info;
  }
  info.cuda_devices = count;
  cudaDeviceProp properties{};
  cudaGetDeviceProperties(&properties, 0);
  info.description = std::to_string(count) + " x " + properties.name;
  return info;
}

}  // namespace geotrain::device
