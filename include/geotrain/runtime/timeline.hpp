// Per-rank event recorder of the training loop (what the timing file holds):
// each event is a kind, a step, a micro-batch, start and end from the
// rank's epoch (set after a barrier, so all ranks share it up to the
// barrier's skew), bytes moved and the peer rank.
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "geotrain/io/timing_file.hpp"

namespace geotrain::runtime {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts the clock (call right after a barrier); events of steps past
  // `max_steps` recorded steps are dropped (bounded memory on long runs).
  void start(int rank, int max_steps);
  void set_step(int step);  // once per step
  bool recording() const { return started_ && !paused_ && steps_seen_ <= max_steps_; }
  void record(io::EventKind kind, Clock::time_point start, Clock::time_point end, int micro_batch = -1,
              std::int64_t bytes = 0, int peer = -1);
  // While paused (inside an event recorded as a whole: evaluation,
  // checkpoint), nested events are not recorded.
  void pause(bool paused) { paused_ = paused; }

  const std::vector<io::TimingEvent>& events() const { return events_; }
  std::vector<io::TimingEvent> take_events() { return std::move(events_); }

 private:
  bool started_ = false, paused_ = false;
  int rank_ = 0, step_ = 0, steps_seen_ = 0, max_steps_ = 0;
  Clock::time_point epoch_{};
  std::vector<io::TimingEvent> events_;
};

}  // namespace geotrain::runtime
