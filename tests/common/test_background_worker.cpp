// The background worker behind asynchronous checkpoints: jobs run in order,
// one at a time, off the caller's thread; wait() returns once they are done
// and reports the first failure; the destructor never loses a queued job.
// Run under ThreadSanitizer too (the tsan preset).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "geotrain/common/background_worker.hpp"

namespace geotrain {
namespace {

using namespace std::chrono_literals;

// What a job waits at until the test opens it, from a thread of its own
// after a delay (while the caller is already waiting on the worker).
class Gate {
 public:
  ~Gate() {
    if (opener_.joinable()) opener_.join();
  }
  void pass() const {
    while (!open_) std::this_thread::sleep_for(100us);
  }
  void open_after(std::chrono::milliseconds delay) {
    opener_ = std::thread([this, delay] {
      std::this_thread::sleep_for(delay);
      open_ = true;
    });
  }

 private:
  std::atomic<bool> open_{false};
  std::thread opener_;
};

// A job that passes `gate`, sets `done` and then, given a `failure`, throws it.
void start_gated_job(BackgroundWorker& worker, const Gate& gate, std::atomic<bool>& done,
                     const char* failure = nullptr) {
  worker.start([&gate, &done, failure] {
    gate.pass();
    done = true;
    if (failure != nullptr) throw std::runtime_error(failure);
  });
}

TEST(BackgroundWorker, RunsJobsInOrderOneAtATimeOffTheCallersThread) {
  std::mutex mutex;
  std::vector<int> order;
  std::atomic<int> running{0}, most_at_once{0};
  std::atomic<bool> on_caller_thread{false};
  const std::thread::id caller = std::this_thread::get_id();
  BackgroundWorker worker;
  for (int i = 0; i < 20; ++i) {
    worker.start([&, i] {
      const int now = ++running;
      most_at_once = std::max(most_at_once.load(), now);
      if (std::this_thread::get_id() == caller) on_caller_thread = true;
      std::this_thread::sleep_for(i % 3 == 0 ? 1ms : 0ms);  // later jobs must not overtake a slow one
      {
        std::lock_guard lock(mutex);
        order.push_back(i);
      }
      --running;
    });
  }
  worker.wait();
  EXPECT_FALSE(worker.busy());
  std::vector<int> expected(20);
  for (int i = 0; i < 20; ++i) expected[i] = i;
  EXPECT_EQ(order, expected);
  EXPECT_EQ(most_at_once.load(), 1);
  EXPECT_FALSE(on_caller_thread.load());
}

TEST(BackgroundWorker, WaitReturnsOnlyOnceTheJobIsDoneAndTheCallerGoesOnMeanwhile) {
  Gate gate;
  std::atomic<bool> done{false};
  BackgroundWorker worker;
  start_gated_job(worker, gate, done);
  EXPECT_TRUE(worker.busy());  // the caller was not blocked by start()
  gate.open_after(20ms);
  worker.wait();
  EXPECT_TRUE(done.load());
  EXPECT_FALSE(worker.busy());
  worker.wait();  // nothing queued: returns at once
}

TEST(BackgroundWorker, TheFirstFailureReachesTheNextWaitAndLaterJobsAreDropped) {
  std::atomic<int> ran{0};
  BackgroundWorker worker;
  worker.start([&] { ++ran; });
  worker.start([&] { throw std::runtime_error("run/step_00000010.h5.tmp: cannot create"); });
  worker.start([&] { ++ran; });  // built on the failed one: not run
  worker.start([] { throw std::runtime_error("second"); });
  try {
    worker.wait();
    FAIL() << "no error reported";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "run/step_00000010.h5.tmp: cannot create");
  }
  EXPECT_EQ(ran.load(), 1);
  // Reported once; the worker takes jobs again.
  worker.wait();
  worker.start([&] { ++ran; });
  worker.wait();
  EXPECT_EQ(ran.load(), 2);
}

// What checkpoints that borrow the live state rely on: wait_idle() returns
// only once the job is done, and leaves its failure for wait().
TEST(BackgroundWorker, WaitIdleReturnsOnceDoneAndKeepsTheFailureForWait) {
  Gate gate;
  std::atomic<bool> done{false};
  BackgroundWorker worker;
  start_gated_job(worker, gate, done, "shard: cannot write");
  gate.open_after(20ms);
  worker.wait_idle();
  EXPECT_TRUE(done.load());
  EXPECT_FALSE(worker.busy());
  EXPECT_THROW(worker.wait(), std::runtime_error);
  worker.wait();  // reported once
}

TEST(BackgroundWorker, DestructorRunsEveryQueuedJobFirst) {
  std::atomic<int> ran{0};
  {
    BackgroundWorker worker;
    for (int i = 0; i < 5; ++i) {
      worker.start([&] {
        std::this_thread::sleep_for(1ms);
        ++ran;
      });
    }
  }
  EXPECT_EQ(ran.load(), 5);
}

TEST(BackgroundWorker, JobsOwnTheirDataAndFreeItBeforeWaitReturns) {
  auto snapshot = std::make_shared<std::vector<float>>(1000, 1.5f);
  std::weak_ptr<std::vector<float>> watch = snapshot;
  std::atomic<double> sum{0};
  BackgroundWorker worker;
  worker.start([data = std::move(snapshot), &sum] {
    double s = 0;
    for (float v : *data) s += v;
    sum = s;
  });
  worker.wait();
  EXPECT_EQ(sum.load(), 1500.0);
  EXPECT_TRUE(watch.expired());
}

// A loan comes back when the job gives it back, while the job goes on
// (the fsync after a checkpoint's last tensor), and at the latest when the
// job ends, also by a failure that never gave it back.
TEST(BackgroundWorker, ALoanComesBackBeforeTheJobEndsOrWhenItFails) {
  std::atomic<bool> finish{false}, finished{false};
  BackgroundWorker worker;
  auto loan = std::make_shared<Loan>();
  worker.start(lend(loan, [&, loan] {
    loan->give_back();
    while (!finish) std::this_thread::sleep_for(100us);
    finished = true;
  }));
  loan->wait();  // returns although the job cannot end yet
  EXPECT_FALSE(finished.load());
  EXPECT_TRUE(worker.busy());
  finish = true;
  worker.wait();
  EXPECT_TRUE(finished.load());

  auto failed = std::make_shared<Loan>();
  worker.start(lend(failed, [] { throw std::runtime_error("rank_00001.h5.tmp: cannot create"); }));
  failed->wait();
  EXPECT_THROW(worker.wait(), std::runtime_error);
}

// The deadlines on the training thread's waits (checkpoint.deadline_s): a
// job that does not end, or a loan not given back, in time is reported as
// such (false), and waiting again once it ends succeeds.
TEST(BackgroundWorker, WaitsWithADeadlineSayWhenTheJobOutlastsIt) {
  std::atomic<bool> release{false};
  BackgroundWorker worker;
  auto loan = std::make_shared<Loan>();
  worker.start(lend(loan, [&] {
    while (!release) std::this_thread::sleep_for(100us);
  }));
  EXPECT_FALSE(loan->wait_for(0.02));
  EXPECT_FALSE(worker.wait_for(0.02));
  EXPECT_TRUE(worker.busy());
  release = true;
  EXPECT_TRUE(worker.wait_for(60));
  EXPECT_TRUE(loan->wait_for(0));
  worker.start([] { throw std::runtime_error("manifest.h5.tmp: cannot create"); });
  EXPECT_THROW(worker.wait_for(60), std::runtime_error);  // a failure is reported as by wait()
}

}  // namespace
}  // namespace geotrain
