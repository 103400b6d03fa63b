#include "backends/gl/shared_binaries.h"

namespace sdgpu::gl {

SharedBinaries& SharedBinaries::Process() {
  // Never destroyed: a delegate may be released during the process's exit, after function-local statics are gone.
  static SharedBinaries* registry = new SharedBinaries();
  return *registry;
}

SharedBinaries::Claim SharedBinaries::ClaimOrWait(const std::string& key, std::string* binary) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    entries_.emplace(key, Entry{});
    Claim claim;
    claim.reg_ = this;
    claim.key_ = key;
    return claim;
  }
  Entry& e = it->second;  // stays in the map while it has waiters
  ++e.waiters;
  cv_.wait(lock, [&e] { return e.published; });
  *binary = e.binary;
  if (--e.waiters == 0) entries_.erase(it);
  return Claim();
}

void SharedBinaries::Claim::Publish(const std::string& binary) {
  if (reg_ == nullptr) return;
  reg_->Publish(key_, binary);
  reg_ = nullptr;
}

void SharedBinaries::Publish(const std::string& key, const std::string& binary) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    if (it->second.waiters == 0) {
      entries_.erase(it);
      return;
    }
    it->second.published = true;
    it->second.binary = binary;
  }
  cv_.notify_all();
}

}  // namespace sdgpu::gl
