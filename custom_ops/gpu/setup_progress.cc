#include "gpu/setup_progress.h"

#include <cstdio>
#include <system_error>
#include <utility>

namespace sdgpu::gpu {

SetupProgress::SetupProgress(std::string tag, const Logger& logger, bool lines)
    : tag_(std::move(tag)), logger_(logger), lines_(lines) {}

SetupProgress::~SetupProgress() {
  std::unique_lock<std::mutex> lock(mu_);
  EndLocked(&lock);
}

void SetupProgress::Begin(const std::string& phase, long long total) {
  std::unique_lock<std::mutex> lock(mu_);
  EndLocked(&lock);
  phase_ = phase;
  detail_.clear();
  done_ = 0;
  total_ = total;
  start_ = last_line_ = Clock::now();
  printed_ = false;
  stop_ = false;
  if (lines_ && logger_.enabled(LogLevel::kWarning)) {
    try {
      ticker_ = std::thread([this] { Tick(); });
    } catch (const std::system_error&) {  // no thread: counters only
    }
  }
}

void SetupProgress::Advance(long long steps) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ += steps;
}

void SetupProgress::SetDetail(const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  detail_ = detail;
}

std::string SetupProgress::ExchangeDetail(std::string detail) {
  std::lock_guard<std::mutex> lock(mu_);
  detail_.swap(detail);
  return detail;
}

void SetupProgress::End() {
  std::unique_lock<std::mutex> lock(mu_);
  EndLocked(&lock);
}

void SetupProgress::EndLocked(std::unique_lock<std::mutex>* lock) {
  if (phase_.empty()) return;
  stop_ = true;
  cv_.notify_all();
  if (ticker_.joinable()) {
    std::thread t = std::move(ticker_);
    lock->unlock();
    t.join();
    lock->lock();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  phase_ms_[phase_] += seconds * 1e3;
  detail_.clear();
  if (printed_) logger_.Progress(LineLocked(seconds) + " done");
  phase_.clear();
}

std::string SetupProgress::LineLocked(double seconds) const {
  char buf[64];
  std::snprintf(buf, sizeof(buf), " (%.0f s)", seconds);
  std::string line = tag_ + ": " + phase_;
  if (total_ > 0) line += " " + std::to_string(done_) + "/" + std::to_string(total_);
  if (!detail_.empty()) line += ", " + detail_;
  return line + buf;
}

void SetupProgress::Tick() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(250));
    if (stop_) break;
    const Clock::time_point now = Clock::now();
    const double running = std::chrono::duration<double>(now - start_).count();
    const double quiet = std::chrono::duration<double>(now - last_line_).count();
    if (running >= kQuietS && (!printed_ || quiet >= kEveryS)) {
      logger_.Progress(LineLocked(running) + " ...");
      printed_ = true;
      last_line_ = now;
    }
  }
}

SetupProgress::Snapshot SetupProgress::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot s;
  s.phase = phase_;
  s.detail = detail_;
  s.done = done_;
  s.total = total_;
  s.seconds = phase_.empty() ? 0.0 : std::chrono::duration<double>(Clock::now() - start_).count();
  s.phase_ms = phase_ms_;
  return s;
}

}  // namespace sdgpu::gpu
