// The overlapped data-parallel gradient sum. During a step's last backward
// the stage reports gradient ranges as they become final (model::GradientReady:
// one descending, gapless run from the buffer's end to 0); they join an open
// bucket, and once it holds `bucket_floats` its sum starts, while the
// backward continues. finish() starts the rest, with the step's scalars
// riding along, and waits for every bucket. Sums are element-wise and in
// rank order, so fp32 results are the same bits however the buffer is cut.
#pragma once
#include <cstddef>
#include <vector>

#include "geotrain/kernels/backend.hpp"
#include "geotrain/runtime/collectives.hpp"

namespace geotrain::runtime {

class GradientBuckets {
 public:
  // `count`: the stage's gradient buffer length (floats).
  GradientBuckets(Collectives& collectives, kernels::Backend& backend, std::size_t count, std::size_t bucket_floats);
  // [begin, end) of `grads` (backend memory) is final for this step.
  void ready(float* grads, std::size_t begin, std::size_t end);
  // Sums what is left (with `values`), waits for all, leaves the sum in `grads`.
  void finish(float* grads, double* values, int value_count);
  // Buckets the last finished step started during its backward (finish's not counted).
  int started_early() const { return last_started_early_; }

 private:
  void start(float* grads, std::size_t begin, std::size_t end, double* values, int value_count);

  Collectives& collectives_;
  kernels::Backend& backend_;
  std::size_t count_, bucket_floats_;
  bool staged_;               // the transport takes host memory but the backend's is a device's
  std::vector<float> host_;   // then: the host copy the sums work on
  std::size_t reported_low_;  // the lowest offset reported so far this step
  std::size_t started_low_;   // the lowest offset whose sum has started
  int started_early_ = 0, last_started_early_ = 0;
};

}  // namespace geotrain::runtime
