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
//   sdgpu_opencl_unit_source
//       the program the OpenCL backend builds for the unit of one kernel (diagnostics; tests preprocess it).
//   sdgpu_check_node
//       the delegate's whole node check (version, counts, options, shape rule, output) on a node described by
//       its model file: what sdlite's model validator and `sdconvert inspect` ask before anything runs.
//   sdgpu_check_options
//       the delegate options parser without creating a delegate.
//   sdgpu_version
// No C++ exception crosses these functions.
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "abi/tflite_abi.h"
#include "delegate/options.h"
#include "delegate/sd_delegate.h"
#include "delegate/stats.h"
#include "entry/backend_factory.h"
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
    if (s.ok()) s = sdgpu::CheckBackendOptions(options);
    std::unique_ptr<sdgpu::Backend> backend;
    if (s.ok()) s = sdgpu::CreateBackend(options, &backend);
    std::unique_ptr<sdgpu::SdDelegate> delegate;
    if (s.ok()) s = sdgpu::SdDelegate::Create(options, std::move(backend), &delegate);
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

// The program KernelLibrary composes for the unit that defines `kernel` under `build_options` (what the OpenCL
// backend builds for it; diagnostics and tests). Returns the full length, -1 on an error or without the OpenCL
// backend, -2 when no unit defines the kernel.
SDGPU_EXPORT int sdgpu_opencl_unit_source(const char* build_options, const char* kernel, char* buf, size_t cap) {
#ifdef SDGPU_HAVE_OPENCL
  try {
    sdgpu::ocl::KernelLibrary lib;
    const sdgpu::Status s = sdgpu::ocl::KernelLibrary::Parse(
        sdgpu::ocl::KernelSource(), sdgpu::ocl::DefinesOf(build_options != nullptr ? build_options : ""), &lib);
    if (!s.ok()) return -1;
    const int unit = lib.UnitOf(kernel != nullptr ? kernel : "");
    return unit < 0 ? -2 : CopyOut(lib.ComposeUnit(unit), buf, cap);
  } catch (...) {
    return -1;
  }
#else
  (void)build_options;
  (void)kernel;
  (void)buf;
  (void)cap;
  return -1;
#endif
}

// Returns 1 when a node of `op_name` with these tensors would be claimed by the delegate's checks, 0 when not
// (one-line reason in `err`), -1 when `op_name` is not one of our ops. Tensor k has id ids[k] (-1: an omitted
// optional input), TfLiteType types[k] and ranks[k] dims taken in order from `dims`; the caller guarantees the
// arrays are that long (at most 64 tensors and rank 16 each are looked at).
SDGPU_EXPORT int sdgpu_check_node(const char* op_name, int version, const void* options, size_t options_size,
                                  int num_inputs, const int* input_ids, const int* input_types, const int* input_ranks,
                                  const int64_t* input_dims, int num_outputs, const int* output_ids,
                                  const int* output_types, const int* output_ranks, const int64_t* output_dims,
                                  char* err, size_t err_cap) {
  try {
    const sdgpu::OpDef* def = sdgpu::FindOpDef(op_name != nullptr ? op_name : "");
    if (def == nullptr) {
      CopyOut("unknown Sd* custom op", err, err_cap);
      return -1;
    }
    auto fail = [&](const std::string& message) {
      CopyOut(message, err, err_cap);
      return 0;
    };
    if (num_inputs < 0 || num_outputs < 0 || num_inputs > 64 || num_outputs > 64) return fail("implausible node");
    if ((num_inputs > 0 && (input_ids == nullptr || input_types == nullptr || input_ranks == nullptr)) ||
        (num_outputs > 0 && (output_ids == nullptr || output_types == nullptr || output_ranks == nullptr))) {
      return fail("null tensor arrays");
    }
    auto tensors = [](int n, const int* types, const int* ranks, const int64_t* dims, std::vector<sdgpu::TensorInfo>* out,
                      std::string* why) {
      size_t at = 0;
      for (int k = 0; k < n; ++k) {
        if (ranks[k] < 0 || ranks[k] > 16 || (ranks[k] > 0 && dims == nullptr)) {
          *why = "tensor " + std::to_string(k) + " has no valid dims";
          return false;
        }
        sdgpu::TensorInfo t;
        t.type = static_cast<sdgpu::abi::TfLiteType>(types[k]);
        t.dims.assign(dims + at, dims + at + ranks[k]);
        at += static_cast<size_t>(ranks[k]);
        out->push_back(std::move(t));
      }
      return true;
    };
    sdgpu::ParsedOp op;
    sdgpu::Status s = sdgpu::CheckOpHeader(*def, version, num_inputs, num_outputs, options, options_size, &op);
    if (!s.ok()) return fail(s.message());
    std::vector<sdgpu::TensorInfo> inputs, outputs;
    std::string why;
    if (!tensors(num_inputs, input_types, input_ranks, input_dims, &inputs, &why) ||
        !tensors(num_outputs, output_types, output_ranks, output_dims, &outputs, &why)) {
      return fail(std::string(def->name) + ": " + why);
    }
    for (int k = 0; k < num_inputs; ++k) {
      if (input_ids[k] < 0) {
        return fail(std::string(def->name) + ": input " + std::to_string(k) +
                    ": optional (missing) tensor input is not supported");
      }
    }
    s = sdgpu::CheckOpTensors(op, inputs, outputs[0], std::vector<int>(input_ids, input_ids + num_inputs),
                              output_ids[0]);
    return s.ok() ? 1 : fail(s.message());
  } catch (...) {
    CopyOut("exception", err, err_cap);
    return 0;
  }
}

// Returns 1 when the key/value options would create a delegate as far as parsing goes (backend availability is
// not checked), 0 with the one-line reason in `err` otherwise; `warnings` gets OptionWarnings, one per line.
SDGPU_EXPORT int sdgpu_check_options(const char* const* keys, const char* const* values, size_t count, char* err,
                                     size_t err_cap, char* warnings, size_t warnings_cap) {
  try {
    sdgpu::DelegateOptions options;
    sdgpu::Status s = count > 4096 ? sdgpu::Status::Error("implausible option count")
                                   : sdgpu::ParseDelegateOptions(keys, values, count, &options);
    if (s.ok()) s = sdgpu::CheckBackendOptions(options);
    CopyOut(s.ok() ? "" : s.message(), err, err_cap);
    std::string joined;
    if (s.ok()) {
      for (const std::string& w : sdgpu::OptionWarnings(options)) joined += (joined.empty() ? "" : "\n") + w;
    }
    CopyOut(joined, warnings, warnings_cap);
    return s.ok() ? 1 : 0;
  } catch (...) {
    CopyOut("exception", err, err_cap);
    CopyOut("", warnings, warnings_cap);
    return 0;
  }
}

SDGPU_EXPORT const char* sdgpu_version() {
  static const std::string version = std::string("sdgpu-delegate 0.1.0 (backends: ") + sdgpu::AvailableBackends() + ")";
  return version.c_str();
}
