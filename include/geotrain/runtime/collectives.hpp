// The sums a rank takes part in (Collectives): over its data-parallel group,
// its pipeline and the tied embedding's two ends. The step's gradient sums
// (gradient_sync.hpp) and the buckets that overlap the data-parallel sum
// with the backward (gradient_buckets.hpp) both call it, so it is neither's.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace geotrain::runtime {

// Error-feedback residuals by part name ("shard_1", "owned"), for checkpoints.
using NamedResiduals = std::vector<std::pair<std::string, std::vector<float>>>;

// This rank's collectives (MPI communicators, or in-process for tests).
class Collectives {
 public:
  virtual ~Collectives() = default;
  // Sum over the ranks that hold the same stage (the data-parallel group).
  virtual void sum_data_parallel(float* data, std::size_t count) = 0;
  // Same, with `values` summed over the group in the same exchange (the
  // loss rides along with the gradient instead of paying its own latency).
  virtual void sum_data_parallel_with_values(float* data, std::size_t count, double* values, int value_count) {
    sum_data_parallel(data, count);
    for (int i = 0; i < value_count; ++i) values[i] = sum_data_parallel_value(values[i]);
  }
  // Sum between this replica's first and last stage (only they call it).
  virtual void sum_tied_embedding(float* data, std::size_t count) = 0;
  // The same sum in two halves, for the last stage: it finishes its backward
  // long before the first stage, so it starts its half on the way, takes
  // part in the pipeline's sum, and only then waits for the first stage's
  // half. `data` must stay untouched until finish_tied_embedding() (which
  // leaves the sum there).
  // Only where splits_tied_embedding(); the others sum it in one call.
  virtual bool splits_tied_embedding() const { return false; }
  virtual void start_tied_embedding(float* data, std::size_t count) { sum_tied_embedding(data, count); }
  virtual void finish_tied_embedding() {}
  // Sum over the stages of this replica (every stage calls it).
  virtual double sum_over_pipeline(double value) = 0;
  // Several scalars in one reduction (one latency on a slow pipeline instead
  // of several); by default one by one.
  virtual void sum_over_pipeline_values(double* values, int count) {
    for (int i = 0; i < count; ++i) values[i] = sum_over_pipeline(values[i]);
  }
  // The same sum left in flight (a flushless pipeline's norm and loss, due
  // one step later): `values` must stay put until finish. By default summed
  // at once.
  virtual void start_pipeline_values(double* values, int count) { sum_over_pipeline_values(values, count); }
  virtual void finish_pipeline_values() {}
  // Sum of a scalar over the data-parallel group (losses, timings).
  virtual double sum_data_parallel_value(double value) = 0;
  // Several in one exchange; by default one by one.
  virtual void sum_data_parallel_values(double* values, int count) {
    for (int i = 0; i < count; ++i) values[i] = sum_data_parallel_value(values[i]);
  }
  // True: the float sums take the backend's device memory (NCCL); false:
  // host memory (MPI), staged.
  virtual bool takes_device_memory() const { return false; }
  // The data-parallel sum in buckets (GradientBuckets): a bucket's sum starts
  // while the backward goes on and is complete after finish_...(); `data`
  // and `values` stay untouched until then. progress_...() lets sums in
  // flight advance (MPI moves non-blocking messages only inside its calls).
  // By default each bucket is summed at once.
  virtual void start_data_parallel_bucket(float* data, std::size_t count, double* values, int value_count) {
    sum_data_parallel_with_values(data, count, values, value_count);
  }
  virtual void progress_data_parallel() {}
  virtual void finish_data_parallel_buckets() {}
  // Local steps' outer exchange (runtime/local_steps.hpp): the sum of one
  // fragment's pseudo-gradient in host memory, complete after
  // finish_data_parallel_buckets(), with the fragment's own error-feedback
  // state. By default summed at once.
  virtual void start_data_parallel_fragment(int /*fragment*/, float* host_data, std::size_t count) {
    sum_data_parallel(host_data, count);
  }
  // The lossy gradient sum's error-feedback state (none for fp32): saved in
  // checkpoints, so that a resume continues bit for bit.
  virtual NamedResiduals gradient_residuals() const { return {}; }
  virtual void restore_gradient_residuals(const NamedResiduals&) {}
  // Drops the data-parallel sums' error feedback (not the tied embedding's):
  // local steps starting after synchronous ones reuse the buckets' slots for
  // their fragments, and a gradient's residual must not leak into a
  // pseudo-gradient. Nothing may be in flight.
  virtual void forget_data_parallel_residuals() {}
};

// One rank alone: every sum is the value itself.
class LocalCollectives : public Collectives {
 public:
  void sum_data_parallel(float*, std::size_t) override {}
  void sum_tied_embedding(float*, std::size_t) override {}
  double sum_over_pipeline(double value) override { return value; }
  double sum_data_parallel_value(double value) override { return value; }
};

}  // namespace geotrain::runtime
