// One background thread that runs posted tasks in order, for host work a caller wants off its own thread but
// finished before it goes on past a point (Drain): e.g. giving a model's weight pages back during the first
// invoke's uploads (gpu/partition.cc). The thread starts at the first Post; where the system refuses a thread,
// Post runs the task on the caller's. Tasks must not throw.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

namespace sdgpu {

class SerialWorker {
 public:
  SerialWorker() = default;
  ~SerialWorker() {
    Drain();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  void Post(std::function<void()> task) {
    if (!started_) {
      started_ = true;
      try {
        thread_ = std::thread([this] { Loop(); });
      } catch (const std::system_error&) {
      }
    }
    if (!thread_.joinable()) {
      task();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_all();
  }

  // Returns once every task posted so far has run.
  void Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return tasks_.empty() && !busy_; });
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stop_, nothing left
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      busy_ = true;
      lock.unlock();
      task();
      lock.lock();
      busy_ = false;
      cv_.notify_all();
    }
  }

  bool started_ = false;  // only the posting thread reads and writes it
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;  // declared last: started after every member above exists
};

}  // namespace sdgpu
