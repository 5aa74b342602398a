#include "geotrain/device/device_info.hpp"

namespace geotrain::device {

DeviceInfo query_devices() {
  return {false, 0, "CPU only (built without the CUDA backend)"};
}

}  // namespace geotrain::device
