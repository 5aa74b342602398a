// pipeline.flushless: each step a slice of one unbroken 1F1B stream, its
// update applied in the next slice (PipeDream-2BW: two weight versions).
#include "geotrain/common/errors.hpp"
#include "rank_trainer.hpp"

namespace geotrain::runtime {

void RankTrainer::start_flushless() {
  const int ahead = config_.pipeline.flushless_ahead;
  if (m_ < plan::flushless_slots(role_.stages, ahead)) {
    throw config_.error("pipeline.flushless", "needs "
                     "train.gradient_accumulation >= (1 + pipeline.flushless_ahead) x (stages - 1) + 1 = " +
                     std::to_string(plan::flushless_slots(role_.stages, ahead)) + ", got " + std::to_string(m_));
  }
  pipeline_.set_flushless(ahead);
  versions_.emplace(stage_, with_.backend);
  sums_.emplace(with_.backend);
  for (int parity = 0; parity < 2; ++parity) {
    stream_inputs_[parity].assign(m_, {});
    stream_targets_[parity].assign(m_, {});
    stream_batches_[parity].assign(m_, {});
  }
}

void RankTrainer::draw_batches(int step) {
  const int parity = step % 2;
  for (int i = 0; i < m_; ++i) {
    data_.next_batch(B_, T_, stream_inputs_[parity][i], stream_targets_[parity][i]);
    stream_batches_[parity][i] = {stream_inputs_[parity][i].data(), stream_targets_[parity][i].data()};
  }
}

bool RankTrainer::stream_stops_after(int step) const {
  return step + 1 == config_.train.steps ||
         (config_.train.eval_every_steps > 0 && (step + 1) % config_.train.eval_every_steps == 0) ||
         (sampler_ && (step + 1) % config_.train.sample_every_steps == 0);
}

void RankTrainer::train_slice(int step) {
  timeline_.set_step(step + 1);
  const auto slice_start = Clock::now();
  const bool fresh = !stream_running_, drains = stream_stops_after(step);
  if (fresh) draw_batches(step);
  if (!drains) draw_batches(step + 1);
  timeline_.record(io::EventKind::data, slice_start, Clock::now());
  const double tokens = result_.tokens_per_step * per_step_replicas() / role_.replicas;
  const double job_loss = pipeline_.run_flushless(
      step, stream_batches_[step % 2], stream_batches_[(step + 1) % 2], with_.links, static_cast<float>(1.0 / tokens),
      fresh, drains, [this, step](int ahead) {
        if (ahead == 1 && pending_) apply_update();
        versions_->read_for(step + ahead);
      });
  if (pending_) apply_update();  // the last stage runs no forward of the step after next
  stream_running_ = !drains;
  pending_loss_ = job_loss;
  sums_->start(stage_, with_.backend, per_step_sums(), role_.stages, per_step_replicas(), &pending_loss_, &timeline_,
               buckets_ ? &*buckets_ : nullptr);
  versions_->set_gradient_aside();
  pending_ = PendingUpdate{step, slice_start, seconds_since(slice_start), drains, pipeline_.times()};
  if (drains) apply_update();
}

void RankTrainer::apply_update() {
  const PendingUpdate p = *pending_;
  pending_.reset();
  const auto start = Clock::now();
  versions_->begin_update(p.step);
  const int summed_replicas = per_step_replicas();  // this step's, whatever after_inner_step changes
  const double norm = sums_->finish(per_step_sums(), &pending_loss_, &timeline_);
  const Update update = apply_optimizer(p.step, norm);
  versions_->end_update();
  const double loss = checked_loss(p.step, pending_loss_, summed_replicas);
  // A slice's time is its own; a draining slice's includes its update.
  const double step_s = p.drained ? seconds_since(p.slice_start) : p.slice_s;
  record_step(p.step, loss, update.learning_rate, norm, step_s,
              seconds_between(start, update.optimizer_start) + update.outer_s, update.optimizer_s, p.times);
}

}  // namespace geotrain::runtime
