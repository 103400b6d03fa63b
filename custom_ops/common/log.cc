#include "common/log.h"

#include <cstdio>
#include <mutex>

namespace sdgpu {

bool ParseLogLevel(std::string_view text, LogLevel* out) {
  struct Entry {
    const char* name;
    const char* digit;
    LogLevel level;
  };
  static constexpr Entry kEntries[] = {
      {"silent", "0", LogLevel::kSilent}, {"error", "1", LogLevel::kError}, {"warning", "2", LogLevel::kWarning},
      {"info", "3", LogLevel::kInfo},     {"debug", "4", LogLevel::kDebug},
  };
  for (const Entry& e : kEntries) {
    if (text == e.name || text == e.digit) {
      *out = e.level;
      return true;
    }
  }
  return false;
}

namespace {

std::mutex& LineMutex() {  // keeps lines from different threads whole
  static std::mutex mu;
  return mu;
}

}  // namespace

void Logger::Log(LogLevel level, const std::string& message) const {
  if (!enabled(level) || level == LogLevel::kSilent) return;
  static const char* const kNames[] = {"", "ERROR", "WARNING", "INFO", "DEBUG"};
  std::lock_guard<std::mutex> lock(LineMutex());
  std::fprintf(stderr, "sdgpu: %s: %s\n", kNames[static_cast<int>(level)], message.c_str());
  std::fflush(stderr);
}

void Logger::Progress(const std::string& message) const {
  if (!enabled(LogLevel::kWarning)) return;
  std::lock_guard<std::mutex> lock(LineMutex());
  std::fprintf(stderr, "sdgpu: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace sdgpu
