#include "geotrain/runtime/gradient_sync.hpp"

#include <cmath>

#include "geotrain/runtime/gradient_buckets.hpp"
#include "geotrain/runtime/staged_buffer.hpp"

namespace geotrain::runtime {

namespace {

// Sums `count` floats of device memory at `data` in place with `sum`.
template <typename Sum>
void sum_buffer(StagedBuffer& staged, bool device_memory, float* data, std::size_t count, Sum sum) {
  sum(staged.updatable(data, count, device_memory), count);
  staged.written();
}

// Each exchange is its own event, so that the timing file shows which one a slow step waited on.
template <typename Exchange>
void timed(Timeline* timeline, std::int64_t bytes, Exchange exchange) {
  const auto start = Timeline::Clock::now();
  exchange();
  if (timeline) timeline->record(io::EventKind::allreduce, start, Timeline::Clock::now(), -1, bytes);
}

}  // namespace

double synchronize_gradients(model::Stage& stage, kernels::Backend& backend, Collectives& collectives,
                             int pipeline_stages, int data_parallel, double* job_sum, Timeline* timeline,
                             GradientBuckets* buckets) {
  GradientSums sums(backend);
  sums.start(stage, backend, collectives, pipeline_stages, data_parallel, job_sum, timeline, buckets);
  return sums.finish(collectives, job_sum, timeline);
}

void GradientSums::start(model::Stage& stage, kernels::Backend& backend, Collectives& collectives,
                         int pipeline_stages, int data_parallel, const double* job_sum, Timeline* timeline,
                         GradientBuckets* buckets) {
  const bool device_memory = collectives.takes_device_memory();
  float* grads = stage.grads();
  const std::size_t count = stage.parameter_count();
  double value = job_sum ? *job_sum : 0.0;
  if (data_parallel > 1 && buckets != nullptr) {
    timed(timeline, static_cast<std::int64_t>(sizeof(float) * count),
          [&] { buckets->finish(grads, &value, job_sum ? 1 : 0); });
  } else if (data_parallel > 1) {
    timed(timeline, static_cast<std::int64_t>(sizeof(float) * count), [&] {
      sum_buffer(staged_, device_memory, grads, count, [&](float* d, std::size_t n) {
        collectives.sum_data_parallel_with_values(d, n, &value, job_sum ? 1 : 0);
      });
    });
  }
  const model::ParameterView* wte = stage.find("wte");
  const bool split_embedding = pipeline_stages > 1 && wte != nullptr && stage.config().tied_head;
  wte_bytes_ = split_embedding ? static_cast<std::int64_t>(sizeof(float) * wte->count) : 0;
  // The tied parameter is counted in the norm on the first stage only.
  const bool counts_wte = !(split_embedding && stage.spec().has_head);
  tied_in_flight_ = !counts_wte && collectives.splits_tied_embedding();
  if (tied_in_flight_) {
    // The last stage finishes its backward long before the first: its half
    // goes now, and its part of the norm needs no wait.
    collectives.start_tied_embedding(staged_.updatable(grads + wte->offset, wte->count, device_memory), wte->count);
  } else if (split_embedding) {
    timed(timeline, wte_bytes_, [&] {
      sum_buffer(staged_, device_memory, grads + wte->offset, wte->count,
                 [&](float* d, std::size_t n) { collectives.sum_tied_embedding(d, n); });
    });
  }
  sums_[0] = model::gradient_squares(stage, backend, grads, counts_wte ? nullptr : wte);
  sums_[1] = value;
  sum_count_ = job_sum ? 2 : 1;
  collectives.start_pipeline_values(sums_, sum_count_);
}

double GradientSums::finish(Collectives& collectives, double* job_sum, Timeline* timeline) {
  timed(timeline, static_cast<std::int64_t>(sizeof(double) * sum_count_), [&] { collectives.finish_pipeline_values(); });
  if (tied_in_flight_) {
    timed(timeline, wte_bytes_, [&] {
      collectives.finish_tied_embedding();
      staged_.written();
    });
    tied_in_flight_ = false;
  }
  if (job_sum) *job_sum = sums_[1];
  return std::sqrt(sums_[0]);
}

}  // namespace geotrain::runtime
