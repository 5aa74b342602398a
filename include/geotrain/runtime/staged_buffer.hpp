// Backend memory handed to a transport. A transport that takes device memory
// (NCCL) gets the backend's pointer itself; one that takes host memory (MPI)
// gets a host copy, and what it writes there goes back once it is done. The
// pipeline's links and the gradient collectives share this one rule.
//
//   StagedBuffer staged(backend);
//   links.send_activation(staged.readable(output, n, direct), n, i);
//   links.receive_gradient(staged.writable(received, n, direct), n, i);
//   staged.written();
#pragma once
#include <cstddef>
#include <vector>

#include "geotrain/kernels/backend.hpp"

namespace geotrain::runtime {

class StagedBuffer {
 public:
  explicit StagedBuffer(kernels::Backend& backend) : backend_(backend) {}

  // `count` floats of `device` for the transport to read. A host copy lives
  // until the next call.
  const float* readable(const float* device, std::size_t count, bool transport_takes_device_memory);
  // For the transport to overwrite; written() delivers the result to `device`.
  float* writable(float* device, std::size_t count, bool transport_takes_device_memory);
  // For the transport to read and overwrite in place (a sum).
  float* updatable(float* device, std::size_t count, bool transport_takes_device_memory);
  // Copies what the transport left in the host copy to the device memory of
  // the last writable() / updatable(); nothing when the transport had it directly.
  void written();

 private:
  kernels::Backend& backend_;
  std::vector<float> host_;
  float* pending_ = nullptr;  // device memory that host_ still has to reach
};

}  // namespace geotrain::runtime
