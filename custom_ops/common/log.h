// Leveled logging to stderr with an "sdgpu:" prefix. A Logger is owned by each
// delegate instance (its level comes from the "log_level" delegate option), so
// two delegates in one process can log at different levels.
#pragma once

#include <string>
#include <string_view>

namespace sdgpu {

enum class LogLevel : int { kSilent = 0, kError = 1, kWarning = 2, kInfo = 3, kDebug = 4 };

// Parses "silent|error|warning|info|debug" or "0".."4"; returns false if unknown.
bool ParseLogLevel(std::string_view text, LogLevel* out);

class Logger {
 public:
  explicit Logger(LogLevel level = LogLevel::kWarning) : level_(level) {}
  void set_level(LogLevel level) { level_ = level; }
  LogLevel level() const { return level_; }
  bool enabled(LogLevel level) const { return static_cast<int>(level) <= static_cast<int>(level_); }

  void Log(LogLevel level, const std::string& message) const;
  void Error(const std::string& m) const { Log(LogLevel::kError, m); }
  void Warning(const std::string& m) const { Log(LogLevel::kWarning, m); }
  void Info(const std::string& m) const { Log(LogLevel::kInfo, m); }
  void Debug(const std::string& m) const { Log(LogLevel::kDebug, m); }
  // A progress line of a long set-up ("sdgpu: opencl: preparing weights 12/61 ..."): no level tag, shown unless
  // the level is below warning (error, silent).
  void Progress(const std::string& m) const;

 private:
  LogLevel level_;
};

}  // namespace sdgpu
