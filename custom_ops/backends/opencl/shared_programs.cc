#include "backends/opencl/shared_programs.h"

#include <utility>

namespace sdgpu::ocl {

const char* KernelSource();  // opencl_device.h; declared here so this file needs nothing else of the device

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::pair<cl_device_id, std::string>, std::weak_ptr<SharedPrograms>> states;
  // One context per device, whatever the build options: a delegate whose partition keeps some steps in the other
  // activation storage launches programs of two states on one queue, with buffers of one context.
  std::map<cl_device_id, std::weak_ptr<ClContextHandle>> contexts;
};

Registry& TheRegistry() {
  // Never destroyed: a delegate may be released during the process's exit (an interpreter's finalisation), after
  // function-local statics are gone; it then still finds a valid registry (it only drops its strong reference).
  static Registry* registry = new Registry();
  return *registry;
}

}  // namespace

Status SharedPrograms::Acquire(const ClApi* api, cl_device_id device, const std::string& build_options,
                               const Logger& logger, std::shared_ptr<SharedPrograms>* out, bool* joined) {
  Registry& reg = TheRegistry();
  // Held while a new state is created (context + library parse, tens of ms): a second delegate created at the
  // same time then waits for that state instead of making its own twin.
  std::lock_guard<std::mutex> lock(reg.mu);
  for (auto it = reg.states.begin(); it != reg.states.end();) {  // states whose last delegate is gone
    it = it->second.expired() ? reg.states.erase(it) : std::next(it);
  }
  const auto key = std::make_pair(device, build_options);
  if (auto it = reg.states.find(key); it != reg.states.end()) {
    if (std::shared_ptr<SharedPrograms> live = it->second.lock()) {
      *out = std::move(live);
      if (joined != nullptr) *joined = true;
      return Status::Ok();
    }
  }
  std::shared_ptr<SharedPrograms> s(new SharedPrograms());
  s->api_ = api;
  s->build_options_ = build_options;
  std::weak_ptr<ClContextHandle>& device_context = reg.contexts[device];  // (one entry per device: never pruned)
  s->context_ = device_context.lock();
  if (s->context_ == nullptr) {
    cl_int err = CL_SUCCESS;
    cl_context ctx = api->clCreateContext(nullptr, 1, &device, nullptr, nullptr, &err);
    SDGPU_RETURN_IF_ERROR(ClCheck(err, "clCreateContext"));
    s->context_ = std::make_shared<ClContextHandle>(api, ctx);
    device_context = s->context_;
  }
  if (Status p = KernelLibrary::Parse(KernelSource(), DefinesOf(build_options), &s->library_); p.ok()) {
    s->split_ = true;
  } else {
    logger.Warning(p.message() + "; building the whole library");
  }
  reg.states[key] = s;
  *out = std::move(s);
  if (joined != nullptr) *joined = false;
  return Status::Ok();
}

cl_program SharedPrograms::FindUnit(int unit) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = units_.find(unit);
  if (it == units_.end()) return nullptr;
  ++shares_;
  return it->second.get();
}

bool SharedPrograms::HasUnit(int unit) const {
  std::lock_guard<std::mutex> lock(mu_);
  return units_.count(unit) != 0;
}

void SharedPrograms::Claim(const std::set<int>& units, std::vector<int>* mine, std::vector<int>* theirs) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int u : units) {
    if (units_.count(u) != 0 || building_.count(u) != 0) {  // built since the caller looked, or being built
      theirs->push_back(u);
    } else {
      building_.insert(u);
      mine->push_back(u);
    }
  }
}

void SharedPrograms::Abandon(int unit) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    building_.erase(unit);
  }
  built_.notify_all();
}

cl_program SharedPrograms::WaitUnit(int unit) {
  std::unique_lock<std::mutex> lock(mu_);
  built_.wait(lock, [&] { return building_.count(unit) == 0; });
  const auto it = units_.find(unit);
  if (it == units_.end()) return nullptr;
  ++shares_;
  return it->second.get();
}

cl_program SharedPrograms::PublishUnit(int unit, ClProgramHandle program) {
  cl_program out = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    building_.erase(unit);
    // emplace keeps an existing entry: a unit built by a delegate that did not claim it (the whole-library
    // fallback's units are not claimed) drops its copy with `program`
    out = units_.emplace(unit, std::move(program)).first->second.get();
  }
  built_.notify_all();
  return out;
}

cl_program SharedPrograms::FindWhole() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!whole_) return nullptr;
  ++shares_;
  return whole_.get();
}

bool SharedPrograms::HasWhole() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<bool>(whole_);
}

cl_program SharedPrograms::PublishWhole(ClProgramHandle program) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!whole_) whole_ = std::move(program);
  return whole_.get();
}

int SharedPrograms::programs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(units_.size()) + (whole_ ? 1 : 0);
}

long long SharedPrograms::shares() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shares_;
}

}  // namespace sdgpu::ocl
