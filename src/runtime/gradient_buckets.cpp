#include "geotrain/runtime/gradient_buckets.hpp"

#include <stdexcept>
#include <string>

namespace geotrain::runtime {

GradientBuckets::GradientBuckets(Collectives& collectives, kernels::Backend& backend, std::size_t count,
                                 std::size_t bucket_floats)
    : collectives_(collectives), backend_(backend), count_(count), bucket_floats_(bucket_floats > 0 ? bucket_floats : 1),
      staged_(!collectives.takes_device_memory() && backend.kind() != kernels::DeviceKind::cpu),
      reported_low_(count), started_low_(count) {
  if (staged_) host_.resize(count);
}

void GradientBuckets::ready(float* grads, std::size_t begin, std::size_t end) {
  if (end != reported_low_ || begin > end) {
    throw std::logic_error("GradientBuckets: range [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") does not end where the last one began (" + std::to_string(reported_low_) + ")");
  }
  reported_low_ = begin;
  if (started_low_ - begin >= bucket_floats_) {
    start(grads, begin, started_low_, nullptr, 0);
    ++started_early_;
  }
  collectives_.progress_data_parallel();
}

void GradientBuckets::finish(float* grads, double* values, int value_count) {
  start(grads, 0, started_low_, values, value_count);
  collectives_.finish_data_parallel_buckets();
  if (staged_) backend_.upload(grads, host_.data(), count_);
  reported_low_ = started_low_ = count_;
  last_started_early_ = started_early_;
  started_early_ = 0;
}

void GradientBuckets::start(float* grads, std::size_t begin, std::size_t end, double* values, int value_count) {
  float* data = grads + begin;
  if (staged_) {
    backend_.download(host_.data() + begin, grads + begin, end - begin);
    data = host_.data() + begin;
  }
  collectives_.start_data_parallel_bucket(data, end - begin, values, value_count);
  started_low_ = begin;
}

}  // namespace geotrain::runtime
