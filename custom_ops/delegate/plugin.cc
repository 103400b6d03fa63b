// Exported C entry points. This is the only file with extern "C" symbols:
//   tflite_plugin_create_delegate / tflite_plugin_destroy_delegate
//       the TFLite external-delegate plugin interface (load_delegate()).
//   sdgpu_delegate_stats_json
//       JSON counters of one delegate (claimed/declined nodes with reasons,
//       scratch/arena bytes, invocations) for tests and tools.
//   sdgpu_check_op_options
//       runs one op's options parser on raw bytes (fuzzing and diagnostics).
//   sdgpu_opencl_kernels
//       the OpenCL kernel library's kernels and units for a build-option string, as KernelLibrary splits it
//       (diagnostics; tests compare it with a C preprocessor's expansion).
//   sdgpu_version
// No C++ exception crosses these functions.
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "abi/tflite_abi.h"
#include "delegate/backend_factory.h"
#include "delegate/options.h"
#include "delegate/sd_delegate.h"
#include "delegate/stats.h"
#include "ops/op_registry.h"
#ifdef SDGPU_HAVE_OPENCL
#include "backends/opencl/kernel_library.h"
#include "backends/opencl/opencl_device.h"
#endif

#define SDGPU_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// Copies `text` into `buf` (NUL-terminated, truncated) and returns its full length.
int CopyOut(const std::string& text, char* buf, size_t cap) {
  if (buf != nullptr && cap > 0) {
    const size_t n = text.size() < cap - 1 ? text.size() : cap - 1;
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int>(text.size());
}

void Report(void (*report_error)(const char*), const std::string& message) {
  if (report_error != nullptr) report_error(("sdgpu: " + message).c_str());
}

}  // namespace

SDGPU_EXPORT sdgpu::abi::TfLiteDelegate* tflite_plugin_create_delegate(const char* const* keys,
                                                                       const char* const* values, size_t count,
                                                                       void (*report_error)(const char*)) {
  try {
    // Python's ctypes declares the count as a C int; only the low 32 bits are meaningful.
    count &= 0xffffffffu;
    if (count > 4096) {
      Report(report_error, "implausible option count");
      return nullptr;
    }
    sdgpu::DelegateOptions options;
    sdgpu::Status s = sdgpu::ParseDelegateOptions(keys, values, count, &options);
    std::unique_ptr<sdgpu::SdDelegate> delegate;
    if (s.ok()) s = sdgpu::SdDelegate::Create(options, &delegate);
    if (!s.ok()) {
      Report(report_error, s.message());
      return nullptr;
    }
    return delegate.release()->tflite();
  } catch (const std::exception& e) {
    Report(report_error, std::string("failed to create delegate: ") + e.what());
  } catch (...) {
    Report(report_error, "failed to create delegate: unknown exception");
  }
  return nullptr;
}

SDGPU_EXPORT void tflite_plugin_destroy_delegate(sdgpu::abi::TfLiteDelegate* delegate) {
  try {
    delete sdgpu::SdDelegate::FromTflite(delegate);
  } catch (...) {
  }
}

SDGPU_EXPORT int sdgpu_delegate_stats_json(const sdgpu::abi::TfLiteDelegate* delegate, char* buf, size_t cap) {
  try {
    const sdgpu::SdDelegate* d = sdgpu::SdDelegate::FromTflite(delegate);
    if (d == nullptr) return -1;
    return CopyOut(d->StatsJson(), buf, cap);
  } catch (...) {
    return -1;
  }
}

// Returns 1 when the options parse, 0 when they do not (message in `err`),
// -1 when `op_name` is not one of our ops.
SDGPU_EXPORT int sdgpu_check_op_options(const char* op_name, const void* data, size_t size, char* err,
                                        size_t err_cap) {
  try {
    const sdgpu::OpDef* def = sdgpu::FindOpDef(op_name != nullptr ? op_name : "");
    if (def == nullptr) {
      CopyOut("unknown op", err, err_cap);
      return -1;
    }
    sdgpu::ParsedOp op;
    sdgpu::Status s = sdgpu::ParseOpOptions(*def, data, size, &op);
    CopyOut(s.ok() ? "" : s.message(), err, err_cap);
    return s.ok() ? 1 : 0;
  } catch (...) {
    CopyOut("exception", err, err_cap);
    return 0;
  }
}

// {"ok":true,"units":N,"kernels":[[unit,"name"],...]} or {"ok":false,"error":"..."}; the full length is returned
// (-1 on an exception or without the OpenCL backend).
SDGPU_EXPORT int sdgpu_opencl_kernels(const char* build_options, char* buf, size_t cap) {
#ifdef SDGPU_HAVE_OPENCL
  try {
    sdgpu::ocl::KernelLibrary lib;
    const sdgpu::Status s = sdgpu::ocl::KernelLibrary::Parse(
        sdgpu::ocl::KernelSource(), sdgpu::ocl::DefinesOf(build_options != nullptr ? build_options : ""), &lib);
    std::string j;
    if (!s.ok()) {
      j = "{\"ok\":false,\"error\":" + sdgpu::JsonString(s.message()) + "}";
    } else {
      j = "{\"ok\":true,\"units\":" + std::to_string(lib.num_units()) + ",\"kernels\":[";
      for (size_t i = 0; i < lib.kernel_names().size(); ++i) {
        const std::string& k = lib.kernel_names()[i];
        j += (i ? "," : "") + std::string("[") + std::to_string(lib.UnitOf(k)) + "," + sdgpu::JsonString(k) + "]";
      }
      j += "]}";
    }
    return CopyOut(j, buf, cap);
  } catch (...) {
    return -1;
  }
#else
  (void)build_options;
  (void)buf;
  (void)cap;
  return -1;
#endif
}

SDGPU_EXPORT const char* sdgpu_version() {
  static const std::string version = std::string("sdgpu-delegate 0.1.0 (backends: ") + sdgpu::AvailableBackends() + ")";
  return version.c_str();
}
