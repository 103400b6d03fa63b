// An identifier of this delegate build, for cache keys: a rebuilt delegate must never trust another build's cache
// entries (its kernels, planner or entry layouts may differ). The GNU build-id note of libsdgpu_delegate.so (a hash
// of the linked bytes, CMakeLists.txt asks the linker for it), else the compile date and time of this file.
#pragma once

#include <string>

namespace sdgpu {

const std::string& BuildId();

}  // namespace sdgpu
