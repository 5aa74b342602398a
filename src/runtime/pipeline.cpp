#include "geotrain/runtime/pipeline.hpp"

#include "geotrain/runtime/device_probe.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <stdexcept>

namespace geotrain::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// A program's time as it runs, in intervals from one mark to the next: each
// is charged to one total (compute or pipeline) and, while the timeline
// records, kept as an event.
class IntervalClock {
 public:
  explicit IntervalClock(Timeline* timeline)
      : timeline_(timeline != nullptr && timeline->recording() ? timeline : nullptr) {}
  bool timed() const { return timeline_ != nullptr; }
  // What ran since the mark is charged to nothing.
  void restart() { mark_ = Clock::now(); }
  double elapsed_s() const { return seconds(mark_, Clock::now()); }
  // Ends the interval: charged to `total`, recorded as `kind` (arguments as Timeline::record's).
  void close(double& total, io::EventKind kind, int micro_batch = -1, std::int64_t bytes = 0, int peer = -1) {
    const auto now = Clock::now();
    total += seconds(mark_, now);
    if (timeline_) timeline_->record(kind, mark_, now, micro_batch, bytes, peer);
    mark_ = now;
  }
  // Ends the interval, charged to `total` but kept out of the timeline.
  void close(double& total) {
    const auto now = Clock::now();
    total += seconds(mark_, now);
    mark_ = now;
  }

 private:
  Timeline* timeline_;
  Clock::time_point mark_ = Clock::now();
};

}  // namespace

PipelineStep::PipelineStep(model::Stage& stage, kernels::Backend& backend, plan::Schedule schedule,
                           int stage_index, int pipeline_stages, int micro_batches, int flushes)
    : stage_(stage), backend_(backend), stage_index_(stage_index), stages_(pipeline_stages),
      micro_batches_(micro_batches), per_flush_(micro_batches / std::max(1, flushes)),
      slots_(plan::activation_slots(schedule, per_flush_, pipeline_stages)),
      program_(plan::pipeline_program(schedule, stage_index, pipeline_stages, per_flush_, flushes)),
      staging_(backend) {
  if (flushes < 1 || micro_batches % flushes != 0) {
    throw std::invalid_argument("PipelineStep: " + std::to_string(micro_batches) + " micro-batches do not make " +
                                std::to_string(flushes) + " equal flushes");
  }
  activation_count_ = static_cast<std::size_t>(stage.micro_batch()) * stage.config().sequence_length *
                      stage.config().hidden;
  received_ = backend_.alloc(activation_count_);
  for (std::size_t k = 0; k < program_.size(); ++k) {
    if (program_[k].kind == plan::StepKind::backward) last_backward_ = k;
  }
}

PipelineStep::~PipelineStep() { backend_.release(received_); }

double PipelineStep::run(const std::vector<MicroBatch>& batches, PipelineLinks& links, float loss_scale) {
  if (static_cast<int>(batches.size()) != micro_batches_) {
    throw std::invalid_argument("PipelineStep::run: expected one batch per micro-batch");
  }
  // i numbers the step's micro-batches (batches, message tags); a slot is reused once its flush is done.
  auto place = [&](const plan::Step& step) {
    const int i = step.flush * per_flush_ + step.micro_batch;
    return Placed{&batches[static_cast<std::size_t>(i)], step.micro_batch % slots_, i, 0};
  };
  return execute(program_, place, last_backward_, links, loss_scale, nullptr, true);
}

double PipelineStep::run_flushless(int step, const std::vector<MicroBatch>& batches,
                                   const std::vector<MicroBatch>& next, PipelineLinks& links, float loss_scale,
                                   bool fresh, bool drains, const std::function<void(int)>& before_compute) {
  const int m = micro_batches_;
  if (static_cast<int>(batches.size()) != m || (!drains && static_cast<int>(next.size()) != m)) {
    throw std::invalid_argument("PipelineStep::run_flushless: expected one batch per micro-batch of both steps");
  }
  if (slots_ != plan::flushless_slots(stages_, ahead_) || m < slots_) {
    throw std::invalid_argument("PipelineStep::run_flushless: needs set_flushless() and m >= its slots");
  }
  const std::vector<plan::Step> program = plan::flushless_program(stage_index_, stages_, m, fresh, drains, ahead_);
  std::size_t last_backward = 0;
  for (std::size_t k = 0; k < program.size(); ++k) {
    if (program[k].kind == plan::StepKind::backward) last_backward = k;
  }
  // Slots go round the whole stream (the next step's forwards share it); the
  // two steps in flight number their messages apart.
  auto place = [&](const plan::Step& s) {
    const long long owner = static_cast<long long>(step) + s.flush;
    const std::vector<MicroBatch>& of = s.flush == 0 ? batches : next;
    return Placed{&of[static_cast<std::size_t>(s.micro_batch)], static_cast<int>((owner * m + s.micro_batch) % slots_),
                  s.micro_batch + m * static_cast<int>(owner % 2), s.flush};
  };
  return execute(program, place, last_backward, links, loss_scale, &before_compute, drains);
}

double PipelineStep::execute(const std::vector<plan::Step>& program,
                             const std::function<Placed(const plan::Step&)>& place, std::size_t last_backward,
                             PipelineLinks& links, float loss_scale, const std::function<void(int)>* before_compute,
                             bool complete_sends) {
  double loss = 0;
  times_ = {};
  IntervalClock clock(timeline_);
  // Links that take host memory get copies through staging_ (memcpy on the
  // CPU backend), timed as pipeline time; device-memory links skip them.
  const auto bytes = static_cast<std::int64_t>(activation_count_ * sizeof(float));
  for (std::size_t k = 0; k < program.size(); ++k) {
    const plan::Step& step = program[k];
    const Placed at = place(step);
    const bool computing = step.kind == plan::StepKind::forward || step.kind == plan::StepKind::backward;
    if (computing && before_compute != nullptr) {  // outside the compute's time: the trainer's update may run here
      (*before_compute)(at.ahead);
      clock.restart();
    }
    const bool receiving = step.kind == plan::StepKind::recv_activation || step.kind == plan::StepKind::recv_gradient;
    if (receiving && clock.timed()) {  // the wait for the message, apart from taking it
      const bool gradient = step.kind == plan::StepKind::recv_gradient;
      links.wait_for_arrival(at.index, gradient);
      clock.close(times_.pipeline_s, io::EventKind::idle, at.index, 0,
                  gradient ? links.next_peer() : links.previous_peer());
    }
    const StepEvent event = run_step(step, at, links, loss_scale, k == last_backward, loss);
    // The backend may run asynchronously (CUDA): compute is charged when a
    // later transfer waits for it, which is where the time is really spent
    // from the pipeline's point of view only on the CPU backend.
    if (computing) emulate_slowdown(slowdown_, clock.elapsed_s());
    clock.close(computing ? times_.compute_s : times_.pipeline_s, event.kind, at.index, computing ? 0 : bytes,
                event.peer);
    if (poll_) {  // exchanges on the side (decoding included): communication, not compute
      poll_();
      clock.close(times_.pipeline_s);
    }
  }
  if (complete_sends) links.complete_sends();
  clock.close(times_.pipeline_s, io::EventKind::send);  // the last sends leaving
  return stage_index_ == stages_ - 1 ? loss : 0.0;
}

PipelineStep::StepEvent PipelineStep::run_step(const plan::Step& step, const Placed& at, PipelineLinks& links,
                                               float loss_scale, bool last_backward, double& loss) {
  const bool first = stage_index_ == 0, last = stage_index_ == stages_ - 1;
  switch (step.kind) {
    case plan::StepKind::recv_activation:
    case plan::StepKind::recv_gradient: {
      const bool gradient = step.kind == plan::StepKind::recv_gradient;
      receive(links, at.index, gradient);
      return {io::EventKind::recv, gradient ? links.next_peer() : links.previous_peer()};
    }
    case plan::StepKind::forward: {
      const double micro_batch_loss =
          stage_.forward(at.slot, first ? at.batch->tokens : nullptr, first ? nullptr : received_,
                         last ? at.batch->targets : nullptr);
      if (at.ahead == 0) loss += micro_batch_loss;
      return {io::EventKind::forward, -1};
    }
    case plan::StepKind::send_activation:
      send(links, stage_.output(at.slot), at.index, false);
      return {io::EventKind::send, links.next_peer()};
    case plan::StepKind::backward:
      stage_.backward(at.slot, last ? nullptr : received_, loss_scale,
                      last_backward && gradient_ready_ ? &gradient_ready_ : nullptr);
      return {io::EventKind::backward, -1};
    case plan::StepKind::send_gradient:
      send(links, stage_.dinput(), at.index, true);
      return {io::EventKind::send, links.previous_peer()};
  }
  return {io::EventKind::forward, -1};
}

void PipelineStep::receive(PipelineLinks& links, int micro_batch, bool gradient) {
  float* target = staging_.writable(received_, activation_count_, links.takes_device_memory());
  if (gradient) links.receive_gradient(target, activation_count_, micro_batch);
  else links.receive_activation(target, activation_count_, micro_batch);
  staging_.written();
}

void PipelineStep::send(PipelineLinks& links, const float* data, int micro_batch, bool gradient) {
  const float* source = staging_.readable(data, activation_count_, links.takes_device_memory());
  if (gradient) links.send_gradient(source, activation_count_, micro_batch);
  else links.send_activation(source, activation_count_, micro_batch);
}

double PipelineStep::forward_only(const MicroBatch& batch, PipelineLinks& links, int index) {
  const bool first = stage_index_ == 0, last = stage_index_ == stages_ - 1;
  if (!first) receive(links, index, false);
  const double loss = stage_.forward(0, first ? batch.tokens : nullptr, first ? nullptr : received_,
                                     last ? batch.targets : nullptr);
  if (!last) {
    send(links, stage_.output(0), index, false);
    links.complete_sends();
  }
  return last ? loss : 0.0;
}

}  // namespace geotrain::runtime
