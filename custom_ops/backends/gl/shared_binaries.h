// GL program binaries that the GL delegates of one process are making at the same time.
//
// Why: sdlite generate sets up its models at once, one thread per model, and each GL delegate has its own context
// (a context is current on one thread). Their shaders overlap -- the elementwise, copy, GroupNorm, GEMM / conv tile
// and Winograd kernels -- so on a first start each delegate compiled every shared one again, side by side, with the
// host's cores shared between the copies (OpenCL delegates share their programs instead: shared_programs.h).
// A device about to compile a program claims its key here; another device that needs the same key meanwhile waits
// for that compile and loads the binary it left (glProgramBinary) instead of compiling it too.
//
// A binary is held only until the devices that waited for it have taken it: later devices find it in the delegate
// cache (when there is one) or compile it themselves, so the process does not keep binaries no one waits for.
// A claim is always published (Claim's destructor publishes "no binary" if its compile failed): waiters then compile.
// Keys carry the device and driver (GlDevice::LinkProgram's cache key), so one process's two drivers never mix.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

namespace sdgpu::gl {

class SharedBinaries {
 public:
  static SharedBinaries& Process();

  // A claim on a key (owns() true) or nothing (false: `binary` was filled by the owner's compile, possibly empty).
  class Claim {
   public:
    Claim() = default;
    Claim(Claim&& o) noexcept : reg_(o.reg_), key_(std::move(o.key_)) { o.reg_ = nullptr; }
    Claim& operator=(Claim&&) = delete;
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    ~Claim() { Publish(""); }
    bool owns() const { return reg_ != nullptr; }
    // Hands `binary` ([format, uint32 LE][bytes], or "" for none) to the devices waiting for this key.
    void Publish(const std::string& binary);

   private:
    friend class SharedBinaries;
    SharedBinaries* reg_ = nullptr;
    std::string key_;
  };

  // Claims `key` if no device of the process is making it; else waits until that device publishes and copies what
  // it published into `*binary` (a returned Claim that owns nothing).
  Claim ClaimOrWait(const std::string& key, std::string* binary);

 private:
  struct Entry {
    bool published = false;
    int waiters = 0;
    std::string binary;
  };
  void Publish(const std::string& key, const std::string& binary);

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry> entries_;  // keys being made, and published ones not yet taken by every waiter
};

}  // namespace sdgpu::gl
