// Which accelerators this process can use. Built from device_info.cu when the
// CUDA backend is compiled in, from device_info.cpu.cpp otherwise.
#pragma once
#include <string>

namespace geotrain::device {

struct DeviceInfo {
  bool cuda_compiled = false;
  int cuda_devices = 0;      // 0 when no driver or no GPU
  std::string description;   // one line for logs
};

DeviceInfo query_devices();

}  // namespace geotrain::device
