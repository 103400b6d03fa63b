// What the OpenCL delegates of one process share for one device: the cl_context, the parsed kernel library and the
// programs built from it (one per kernel unit, or the whole library), keyed by the device and the build options.
//
// Why: an app (sdlite generate: text encoder, UNet, VAE decoder) creates one delegate per model, and the models use
// many of the same kernel units (binary_f32, copy_nd, reduce, the GEMM tiles). With a context each, every delegate
// parsed the library again and built (or read from the disk cache) the same programs again: 0.2-0.25 s per delegate
// with a warm cache, 1.5-1.9 s on a first start, on an H200. A program depends only on its source (the unit, the
// same whatever model asks for it), the build options and the device, so one built program serves every delegate
// of the process whose device and options match.
//
// What stays per delegate (OpenClDevice): the command queue (its profiling property is a delegate option), the
// cl_kernel objects (clSetKernelArg on a cl_kernel shared by two threads would race), buffers, stats and options.
//
// Lifetime: a process-wide registry holds weak references, each OpenClDevice a strong one, so the state lives while
// any delegate of its key does and is released (programs, then the context) with the last one.
//
// Locking: the registry's mutex is held only to find or create a state; a state's mutex only to look up or insert
// a program. Neither is held while compiling, and the state never calls into a delegate, so a delegate may take
// them while holding its own mutex (always in that order) without risking a deadlock.
//
// Builds in flight: a delegate claims the units it is about to compile (Claim); another delegate that needs one of
// them meanwhile waits for that build (WaitUnit) instead of compiling it a second time -- models set up at the same
// time (sdlite's warm-up) share most units, and a duplicate compile takes a host core from a unit nobody has yet.
// A delegate waits only after it has published or abandoned every unit it claimed, so two waiting delegates never
// wait for each other. An abandoned claim (its build failed) wakes the waiters, which then build the unit themselves.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backends/opencl/cl_api.h"
#include "backends/opencl/cl_handle.h"
#include "backends/opencl/kernel_library.h"
#include "common/log.h"
#include "common/status.h"

namespace sdgpu::ocl {

class SharedPrograms {
 public:
  // The state of (device, build_options) in this process: the one a live delegate holds, else a new one (context
  // created, library parsed; a library that cannot be split is logged once, here, and built whole). `joined`
  // (optional): true where it was a live delegate's.
  static Status Acquire(const ClApi* api, cl_device_id device, const std::string& build_options, const Logger& logger,
                        std::shared_ptr<SharedPrograms>* out, bool* joined = nullptr);

  SharedPrograms(const SharedPrograms&) = delete;
  SharedPrograms& operator=(const SharedPrograms&) = delete;

  // The device's context: one per device in the process, shared by the states of every build option set.
  cl_context context() const { return context_->get(); }
  const std::string& build_options() const { return build_options_; }
  // The parsed library (read-only once created, so no lock); meaningful only when split().
  const KernelLibrary& library() const { return library_; }
  bool split() const { return split_; }

  // The program of `unit` already built in this process, or null; a program found counts as one share.
  cl_program FindUnit(int unit) const;
  // Whether FindUnit would find one (not counted: a question, not a take).
  bool HasUnit(int unit) const;
  // Splits `units` (none of them built: FindUnit said so) into those the caller is now to build, claimed for it
  // (`mine`: each must end in PublishUnit or Abandon) and those another delegate is building (`theirs`: WaitUnit).
  void Claim(const std::set<int>& units, std::vector<int>* mine, std::vector<int>* theirs);
  // Gives up a claim whose build failed: the waiters wake and find nothing.
  void Abandon(int unit);
  // Waits until no delegate is building `unit`; its program (counted as a share), or null when none was published.
  cl_program WaitUnit(int unit);
  // Publishes a program of `unit` the caller built (ending its claim); returns the one every delegate uses from now
  // on: `program`, or the program another delegate published first (then `program` is released here).
  cl_program PublishUnit(int unit, ClProgramHandle program);
  // The same for the whole library as one program (the fallback when the library cannot be split or a unit fails).
  cl_program FindWhole() const;
  bool HasWhole() const;
  cl_program PublishWhole(ClProgramHandle program);

  // Programs held, and how many times a delegate took one another delegate had built (logs, tests).
  int programs() const;
  long long shares() const;

 private:
  SharedPrograms() = default;

  const ClApi* api_ = nullptr;
  std::string build_options_;
  // Declared before the programs: members are destroyed in reverse order, so the programs go before their context
  // (released with the last state of the device).
  std::shared_ptr<ClContextHandle> context_;
  KernelLibrary library_;
  bool split_ = false;
  mutable std::mutex mu_;  // guards the members below; never held while compiling
  std::condition_variable built_;  // a claim ended (published or abandoned)
  std::map<int, ClProgramHandle> units_;
  std::set<int> building_;  // claimed units
  ClProgramHandle whole_;
  mutable long long shares_ = 0;
};

}  // namespace sdgpu::ocl
