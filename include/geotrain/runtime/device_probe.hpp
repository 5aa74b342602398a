// How fast a rank's backend computes and how much memory it has: what the
// layout search (pipeline.layout = auto) and `geotrain probe` know of each
// device, in the scenario format's terms ([device_types]: tflops, memory_gib).
#pragma once
#include <vector>

#include "geotrain/kernels/backend.hpp"
#include "geotrain/plan/network.hpp"

namespace geotrain::runtime {

struct DeviceMeasurement {
  double tflops = 0;        // achieved by a GEMM at the training precision (slowdown included)
  double memory_bytes = 0;  // the device's, or the host's share per rank on the host
};

// A GEMM of a transformer layer's shape, repeated for about `seconds`, on
// `backend` at `precision`. `slowdown` (emulation.compute_slowdown) makes it
// take that many times as long, as training does. `ranks_on_host` divides
// the host's memory where the backend has none of its own (the CPU).
DeviceMeasurement measure_device(kernels::Backend& backend, MatmulPrecision precision, double slowdown,
                                 int ranks_on_host, double seconds = 0.25);

// emulation.compute_slowdown: sleeps (factor - 1) x `elapsed_s`, so that a
// compute that took `elapsed_s` seems to take factor times as long.
void emulate_slowdown(double factor, double elapsed_s);

// Device types for `network` from one measurement per device: devices
// within `tolerance` of a type's fastest member share that type (named
// measured-1, measured-2, ... fastest first; its speed the members' mean,
// its memory their smallest), so that timing noise does not split equal
// devices. Replaces any types the network had.
void set_measured_types(plan::Network& network, const std::vector<DeviceMeasurement>& devices,
                        double tolerance = 0.15);

}  // namespace geotrain::runtime
