// One background thread that runs jobs in the order they were given, for
// work that must not stall the caller (writing a checkpoint while training
// goes on). The caller learns of a job's failure at its next wait().
//
// Jobs must not touch what the caller keeps changing: they own their data
// (a snapshot taken before start(), or state the caller leaves alone until
// wait_idle()). A job that calls MPI (the parallel checkpoint forms) uses a
// communicator no other thread uses, under MPI_THREAD_MULTIPLE.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "geotrain/common/non_copyable.hpp"

namespace geotrain {

// What a caller lends a background job (a checkpoint that reads the live
// parameters instead of a copy) and gets back before the job ends: the job
// calls give_back() once it has read the last byte, and may go on (an
// fsync, a rename) while the caller changes the data again. lend() gives it
// back when the job ends in any way, so that a failed job never leaves the
// caller waiting.
class Loan {
 public:
  // Idempotent; from any thread.
  void give_back();
  // Blocks until give_back().
  void wait() const;
  // The same for at most `seconds`: false if not given back by then.
  bool wait_for(double seconds) const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  bool returned_ = false;
};

// `job` as a BackgroundWorker job that gives `loan` back when it ends
// (normally or by an exception) at the latest.
std::function<void()> lend(std::shared_ptr<Loan> loan, std::function<void()> job);

class BackgroundWorker : NonCopyable {
 public:
  BackgroundWorker();
  // Waits for the queued jobs (their errors are dropped: a destructor
  // cannot report them; call wait() first to hear of them).
  ~BackgroundWorker();

  // Queues `job`; jobs run one at a time, first in, first out.
  void start(std::function<void()> job);
  // A job is queued or running.
  bool busy() const;
  // Blocks until every queued job has run, then rethrows the first
  // exception a job threw since the last wait(); the jobs queued after a
  // failed one are dropped, not run (they would build on it).
  void wait();
  // Blocks until every queued job has run; errors stay for wait().
  void wait_idle();
  // wait() for at most `seconds`: false (nothing reported, the jobs go on)
  // if they have not all run by then.
  bool wait_for(double seconds);

 private:
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  bool running_ = false;  // a job is out of the queue and running
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace geotrain
