// The timing records: the recorder's bounds, the events' byte form, and the
// assembled run (plan layout, per-stage compute medians, prediction).
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>

#include "geotrain/io/timing_file.hpp"
#include "geotrain/runtime/timeline.hpp"
#include "geotrain/runtime/timing_record.hpp"

namespace geotrain::runtime {
namespace {

using io::EventKind;
using Clock = Timeline::Clock;

TEST(Timeline, RecordsFromItsEpochAndDropsPausedAndLateSteps) {
  Timeline t;
  t.record(EventKind::forward, Clock::now(), Clock::now());  // not started: dropped
  t.start(3, 2);
  const auto epoch_ish = Clock::now();
  t.set_step(1);
  t.record(EventKind::forward, epoch_ish, epoch_ish + std::chrono::milliseconds(5), 0, 0, -1);
  t.pause(true);
  t.record(EventKind::allreduce, Clock::now(), Clock::now());  // inside an evaluation: dropped
  t.pause(false);
  t.set_step(2);
  t.record(EventKind::send, epoch_ish, epoch_ish + std::chrono::milliseconds(1), 1, 4096, 7);
  t.set_step(3);  // past max_steps = 2
  t.record(EventKind::backward, Clock::now(), Clock::now());
  const auto& events = t.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].rank, 3);
  EXPECT_EQ(events[0].step, 1);
  EXPECT_EQ(events[0].kind, EventKind::forward);
  EXPECT_GE(events[0].start_s, 0.0);
  EXPECT_NEAR(events[0].end_s - events[0].start_s, 0.005, 1e-9);
  EXPECT_EQ(events[1].step, 2);
  EXPECT_EQ(events[1].bytes, 4096);
  EXPECT_EQ(events[1].peer, 7);
  EXPECT_EQ(events[1].micro_batch, 1);
}

TEST(TimingEvents, RoundTripAndRejectMalformedBytes) {
  std::vector<io::TimingEvent> events(3);
  events[1].kind = EventKind::checkpoint;
  events[1].start_s = 1.5, events[1].end_s = 2.5, events[1].bytes = 99, events[1].peer = 4;
  const auto back = io::deserialize_events(io::serialize_events(events));
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[1].kind, EventKind::checkpoint);
  EXPECT_EQ(back[1].bytes, 99);
  EXPECT_DOUBLE_EQ(back[1].end_s, 2.5);
  auto bytes = io::serialize_events(events);
  bytes.pop_back();
  EXPECT_THROW(io::deserialize_events(bytes), std::invalid_argument);
  events[2].start_s = 3, events[2].end_s = 1;  // ends before it starts
  EXPECT_THROW(io::deserialize_events(io::serialize_events(events)), std::invalid_argument);
}

io::TimingEvent event(int rank, EventKind kind, double start, double end) {
  io::TimingEvent e;
  e.rank = rank, e.kind = kind, e.start_s = start, e.end_s = end;
  return e;
}

TEST(TimingRecord, MediansPerStageAndPlanLayout) {
  // 2 stages x 1 replica; stage of rank 0 is 1, of rank 1 is 0 (a shuffled plan).
  JobDescription job;
  job.network.device_count = 2;
  job.network.latency_s = {0, 1e-3, 1e-3, 0};
  job.network.bandwidth_bytes_per_s = {1e9, 1e9, 1e9, 1e9};
  job.network_source = "test";
  job.plan.pipeline_stages = 2;
  job.plan.data_parallel = 1;
  job.plan.stages = {{1}, {0}};
  RankTiming r0, r1;
  r0.events = {event(0, EventKind::forward, 0, 3), event(0, EventKind::forward, 3, 4), event(0, EventKind::forward, 4, 9),
               event(0, EventKind::backward, 9, 15), event(0, EventKind::optimizer, 15, 16)};
  r1.events = {event(1, EventKind::forward, 0, 2), event(1, EventKind::backward, 2, 6)};
  r0.step_seconds = {16}, r1.step_seconds = {6};
  r0.stage_parameters = 10, r1.stage_parameters = 20;
  TrainResult reporting;
  reporting.step_loss = {2.5};
  reporting.step_learning_rate = {1e-3};
  reporting.step_grad_norm = {1};
  io::Config config;
  config.train.gradient_accumulation = 1;
  config.train.micro_batch_sequences = 1;
  ModelShape model;
  model.sequence_length = 4, model.hidden = 8, model.vocabulary = 16;
  const io::TimingRun run = make_timing_run(config, model, job, reporting, {r0, r1});
  EXPECT_EQ(run.stage_of_rank, (std::vector<std::int32_t>{1, 0}));
  EXPECT_EQ(run.devices, (std::vector<std::int32_t>{1, 0}));
  ASSERT_EQ(run.forward_s.size(), 2u);
  EXPECT_DOUBLE_EQ(run.forward_s[1], 3.0);   // rank 0 = stage 1: median of 3, 1, 5
  EXPECT_DOUBLE_EQ(run.forward_s[0], 2.0);
  EXPECT_DOUBLE_EQ(run.backward_s[1], 6.0);
  EXPECT_EQ(run.wall_time_s, (std::vector<double>{16, 6}));
  EXPECT_EQ(run.step, (std::vector<std::int32_t>{1}));
  // One micro-batch through 2 stages by hand: F0 2, send 1 ms + 128 B / 1e9,
  // F1 3, B1 6, send back, B0 4: stage 0 is done last, at 15 + 2 hops. No
  // data-parallel exchange (one replica). Then the end of the step: stage 0's
  // half of the tied embedding (16 x 8 floats) to stage 1, 1 ms + 512 B / 1e9,
  // arrives after its part of the norm (1 ms); then the optimizer's median, 1 s.
  const double hop = 1e-3 + 4.0 * 4 * 8 / 1e9;
  const double tied = 1e-3 + 4.0 * 16 * 8 / 1e9;
  EXPECT_NEAR(run.predicted_iteration_s, 2 + hop + 3 + 6 + hop + 4 + tied + 1, 1e-9);
}

}  // namespace
}  // namespace geotrain::runtime
