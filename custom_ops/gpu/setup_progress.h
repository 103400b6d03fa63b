// What a GPU delegate's one-time set-up is doing -- compiling kernels, preparing weights, running the first
// inference (GL program compiles and GEMM tile tuning happen there) -- for people and for progress bars:
//   * log lines: once a phase has run kQuietS seconds, one line every kEveryS seconds while it lasts
//     ("sdgpu: opencl: preparing weights 12/61 (4 s) ...") and one when it ends, from a ticker thread, so a long
//     first start is never silent for more than a few seconds and a warm start prints nothing;
//   * counters: the current phase and its steps (stats setup_phase / setup_done / setup_total, which sdlite polls
//     from another thread while the first inference runs) and the seconds each phase took (setup_phases_ms).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "common/log.h"

namespace sdgpu::gpu {

class SetupProgress {
 public:
  static constexpr double kQuietS = 3.0;
  static constexpr double kEveryS = 5.0;

  // `tag` prefixes the lines ("opencl"); `lines` false: counters only (delegate option setup_progress=0).
  SetupProgress(std::string tag, const Logger& logger, bool lines);
  ~SetupProgress();
  SetupProgress(const SetupProgress&) = delete;
  SetupProgress& operator=(const SetupProgress&) = delete;

  // Starts `phase` ("preparing weights") of `total` steps (0: unknown), ending the one before.
  void Begin(const std::string& phase, long long total);
  void Advance(long long steps = 1);
  // What the current phase is busy with right now ("compiling 3 kernels"), shown in its lines; "" clears it.
  void SetDetail(const std::string& detail);
  // SetDetail for a scope: the detail before it comes back at the scope's end (a GL program compiled while a tuning
  // candidate's detail is shown).
  class ScopedDetail {
   public:
    ScopedDetail(SetupProgress& progress, const std::string& detail)
        : progress_(progress), before_(progress.ExchangeDetail(detail)) {}
    ~ScopedDetail() { progress_.ExchangeDetail(before_); }
    ScopedDetail(const ScopedDetail&) = delete;
    ScopedDetail& operator=(const ScopedDetail&) = delete;

   private:
    SetupProgress& progress_;
    std::string before_;
  };
  // Sets the detail, returns the one it replaced.
  std::string ExchangeDetail(std::string detail);
  void End();

  struct Snapshot {
    std::string phase;  // "" between phases
    std::string detail;
    long long done = 0, total = 0;
    double seconds = 0.0;  // in the current phase
    std::map<std::string, double> phase_ms;  // every ended phase: milliseconds, summed over its runs
  };
  Snapshot snapshot() const;

 private:
  using Clock = std::chrono::steady_clock;
  void EndLocked(std::unique_lock<std::mutex>* lock);
  void Tick();
  std::string LineLocked(double seconds) const;

  std::string tag_;
  Logger logger_;
  bool lines_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string phase_, detail_;
  long long done_ = 0, total_ = 0;
  Clock::time_point start_, last_line_;
  bool printed_ = false;
  bool stop_ = false;
  std::map<std::string, double> phase_ms_;
  std::thread ticker_;
};

}  // namespace sdgpu::gpu
