// After a pipeline step: make every replica's gradients the gradient of the
// whole global batch, join the two halves of the tied embedding, and compute
// the global gradient norm for clipping, so that the AdamW step is identical
// on every replica and on both copies of the embedding.
#pragma once
#include <cstdint>

#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"
#include "geotrain/runtime/collectives.hpp"
#include "geotrain/runtime/staged_buffer.hpp"
#include "geotrain/runtime/timeline.hpp"

namespace geotrain::runtime {

// Returns the global L2 norm of the gradient (wte counted once). With
// `job_sum`, that value is summed over the whole job (replicas and stages)
// in the same exchanges as the gradient and the norm (the trainer's loss),
// in place. With `timeline`, each exchange is recorded as an all-reduce
// event of the bytes it sums.
// With `buckets`, the data-parallel sum is the one they started during the
// backward, finished here.
class GradientBuckets;
double synchronize_gradients(model::Stage& stage, kernels::Backend& backend, Collectives& collectives,
                             int pipeline_stages, int data_parallel, double* job_sum = nullptr,
                             Timeline* timeline = nullptr, GradientBuckets* buckets = nullptr);

// synchronize_gradients in two halves, for a flushless pipeline whose step
// ends while the next one runs. start() does what needs this step's
// gradient only (the data-parallel sum, the first stage's half of the tied
// embedding, this stage's part of the norm) and leaves the sums over the
// pipeline in flight (the last stage's half of the tied embedding, the norm
// and `job_sum`); finish() waits for them and returns the global norm,
// *job_sum summed. The gradient buffer must stay untouched in between.
class GradientSums {
 public:
  explicit GradientSums(kernels::Backend& backend) : staged_(backend) {}
  void start(model::Stage& stage, kernels::Backend& backend, Collectives& collectives, int pipeline_stages,
             int data_parallel, const double* job_sum, Timeline* timeline, GradientBuckets* buckets);
  double finish(Collectives& collectives, double* job_sum, Timeline* timeline);

 private:
  StagedBuffer staged_;
  double sums_[2] = {0, 0};
  int sum_count_ = 1;
  bool tied_in_flight_ = false;
  std::int64_t wte_bytes_ = 0;
};

}  // namespace geotrain::runtime
