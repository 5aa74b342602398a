#include "geotrain/common/background_worker.hpp"

#include <chrono>
#include <utility>

namespace geotrain {

void Loan::give_back() {
  {
    std::lock_guard lock(mutex_);
    returned_ = true;
  }
  changed_.notify_all();
}

void Loan::wait() const {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return returned_; });
}

bool Loan::wait_for(double seconds) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return returned_; });
}

std::function<void()> lend(std::shared_ptr<Loan> loan, std::function<void()> job) {
  return [loan = std::move(loan), job = std::move(job)] {
    struct GiveBackOnExit {
      Loan& loan;
      ~GiveBackOnExit() { loan.give_back(); }
    } on_exit{*loan};
    job();
  };
}

BackgroundWorker::BackgroundWorker() : thread_([this] { loop(); }) {}

BackgroundWorker::~BackgroundWorker() {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return queue_.empty() && !running_; });
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void BackgroundWorker::start(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(job));
  }
  changed_.notify_all();
}

bool BackgroundWorker::busy() const {
  std::lock_guard lock(mutex_);
  return running_ || !queue_.empty();
}

void BackgroundWorker::wait() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty() && !running_; });
  if (std::exception_ptr error = std::exchange(error_, nullptr)) std::rethrow_exception(error);
}

bool BackgroundWorker::wait_for(double seconds) {
  std::unique_lock lock(mutex_);
  if (!changed_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return queue_.empty() && !running_; })) {
    return false;
  }
  if (std::exception_ptr error = std::exchange(error_, nullptr)) std::rethrow_exception(error);
  return true;
}

void BackgroundWorker::wait_idle() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty() && !running_; });
}

void BackgroundWorker::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    if (error_) {  // after a failure, until wait() reports it: dropped
      changed_.notify_all();  // the queue may be empty now
      continue;
    }
    running_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    job = nullptr;  // what the job held (a snapshot) is freed before wait() returns
    lock.lock();
    running_ = false;
    if (error) error_ = error;
    changed_.notify_all();
  }
}

}  // namespace geotrain
