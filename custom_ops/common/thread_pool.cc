#include "common/thread_pool.h"

namespace sdgpu {

ThreadPool::ThreadPool(int num_threads) {
  const int extra = num_threads > 1 ? num_threads - 1 : 0;
  workers_.reserve(extra);
  for (int i = 0; i < extra; ++i) {
    try {
      workers_.emplace_back([this, i] { WorkerLoop(i + 1); });
    } catch (...) {  // the system refused a thread: run with the workers started so far (never throw out)
      break;
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunTasks(int worker) {
  for (;;) {
    const size_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= num_tasks_) return;
    (*job_)(task, worker);
  }
}

void ThreadPool::WorkerLoop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    RunTasks(worker);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(size_t num_tasks, const std::function<void(size_t, int)>& fn) {
  if (num_tasks == 0) return;
  if (workers_.empty() || num_tasks == 1) {
    for (size_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    num_tasks_ = num_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    active_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  RunTasks(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return active_ == 0; });
  job_ = nullptr;
}

void ThreadPool::ParallelForIf(bool parallel, size_t num_tasks, const std::function<void(size_t, int)>& fn) {
  if (parallel) {
    ParallelFor(num_tasks, fn);
    return;
  }
  for (size_t t = 0; t < num_tasks; ++t) fn(t, 0);
}

}  // namespace sdgpu
