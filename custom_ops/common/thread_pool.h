// A small fixed-size thread pool with one primitive: ParallelFor over task
// indices. Kernels get the worker id so they can use per-worker scratch.
//
// Trade-offs: tasks are handed out by an atomic counter (dynamic scheduling,
// good for uneven work such as causal attention) and the calling thread joins
// in as worker 0, so a pool of size 1 has no extra threads and no overhead.
// Concurrent ParallelFor calls from different threads are serialised.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sdgpu {

class ThreadPool {
 public:
  // `num_threads` >= 1 counts the calling thread. Threads the system refuses are left out (num_threads() says how
  // many run); the constructor does not throw for them.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(task, worker) for task in [0, num_tasks). Blocks until done.
  // `fn` must not throw (kernels are noexcept by construction).
  void ParallelFor(size_t num_tasks, const std::function<void(size_t task, int worker)>& fn);

  // ParallelFor when `parallel`, else the same tasks in order on the calling thread as worker 0. Waking and
  // joining the workers costs tens of microseconds (more on a busy machine): kernels pass parallel = false for
  // work that one core finishes in about that time.
  void ParallelForIf(bool parallel, size_t num_tasks, const std::function<void(size_t task, int worker)>& fn);

 private:
  void WorkerLoop(int worker);
  void RunTasks(int worker);

  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serialises ParallelFor callers
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(size_t, int)>* job_ = nullptr;
  size_t num_tasks_ = 0;
  std::atomic<size_t> next_task_{0};
  int active_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace sdgpu
