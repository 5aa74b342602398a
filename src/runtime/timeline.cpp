#include "geotrain/runtime/timeline.hpp"

namespace geotrain::runtime {

void Timeline::start(int rank, int max_steps) {
  started_ = true;
  rank_ = rank;
  max_steps_ = max_steps;
  epoch_ = Clock::now();
}

void Timeline::set_step(int step) {
  step_ = step;
  ++steps_seen_;
}

void Timeline::record(io::EventKind kind, Clock::time_point start, Clock::time_point end, int micro_batch,
                      std::int64_t bytes, int peer) {
  if (!recording()) return;
  io::TimingEvent e;
  e.rank = rank_;
  e.step = step_;
  e.micro_batch = micro_batch;
  e.kind = kind;
  e.start_s = std::chrono::duration<double>(start - epoch_).count();
  e.end_s = std::chrono::duration<double>(end - epoch_).count();
  e.bytes = bytes;
  e.peer = peer;
  events_.push_back(e);
}

}  // namespace geotrain::runtime
