// Minimal error-or-ok value used everywhere inside the delegate. We do not let
// exceptions cross the C ABI, so all fallible internal code returns Status.
#pragma once

#include <string>
#include <utility>

namespace sdgpu {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

#define SDGPU_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::sdgpu::Status _sdgpu_status = (expr);  \
    if (!_sdgpu_status.ok()) return _sdgpu_status; \
  } while (0)

}  // namespace sdgpu
