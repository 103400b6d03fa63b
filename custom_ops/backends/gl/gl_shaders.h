// The GLSL kernel library of the gl backend: the embedded sources split into
// kernels, and the composition of one `#version 310 es` compute shader per
// (kernel, local size).
//
// Source layout (the shaders gpu/dialect/gen_glsl.py generates from the kernel
// dialect, plus backends/gl/shaders/common.glsl; embedded at build time, each
// file preceded by a "//== file <path>" line):
//   * a file without kernels (shaders/common.glsl) is a prelude included in
//     every shader: precisions, work-item ids, shared helpers;
//   * in the other files, the text before the first "//== kernel <name>" line
//     is shared by that file's kernels (helper functions, #defines), and each
//     kernel section declares its own buffers and uniforms, then main();
//   * a "//== fragment <name>" section is text that kernel sections of any
//     file paste with a "//== include <name>" line: the instances of one
//     templated kernel (tile sizes as #defines before the include) share code
//     that uses their buffers, without token-pasting macros.
// Kernel names and parameter orders are those of the OpenCL sources (see
// gpu/device.h for the convention): the k-th buffer parameter is
// `layout(std430, binding = k) buffer`, the j-th scalar (element offsets
// included) is `layout(location = j) uniform`.
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace sdgpu::gl {

// The concatenated GLSL sources (generated from the *.glsl files at build time).
const char* ShaderSource();
// The same kernels built for half activation storage (SD_ACT_HALF 1; delegate option activations_fp16).
const char* ShaderSourceActHalf();
// Compact variants (SD_GL_COMPACT 1: aligned float4 accesses as four floats, no NAME_v4 views, fewer storage blocks)
// of the kernels where they differ, for devices that refuse the normal ones (gpu/dialect/prelude.h).
const char* ShaderSourceCompact();
const char* ShaderSourceActHalfCompact();

// A kernel or fragment section.
struct KernelSource {
  std::string name;
  int file = 0;            // index into ShaderLibrary::files()
  std::string body;        // the section's text (declarations + main for a kernel)
  int body_line = 1;       // line of the section's first line in its file
};

class ShaderLibrary {
 public:
  // Splits `embedded` (ShaderSource() format); fails on a duplicate kernel/fragment name, a malformed
  // marker or an include of an unknown fragment.
  static Status Parse(const char* embedded, ShaderLibrary* out);

  const KernelSource* Find(const std::string& name) const;
  size_t num_kernels() const { return kernels_.size(); }
  // File path of `KernelSource::file` (also the `#line` source-string number in compile logs).
  const std::string& file_path(int file) const { return files_.at(file).path; }

  // The storage blocks (lines declaring `layout(std430, ...)`) of the kernel's shader: its buffers and their views
  // (gen_glsl.py's NAME_v4 / NAME_u32), what GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS limits.
  int StorageBlocks(const KernelSource& kernel) const;

  // A complete compute shader: version line, local size, preludes, the kernel's file-common text and
  // its section, with `#line` directives so compile errors name the .glsl line ("<file no>:<line>").
  std::string Compose(const KernelSource& kernel, const std::array<size_t, 3>& local) const;

 private:
  struct File {
    std::string path;
    std::string common;  // text before the first kernel marker (the whole file for a prelude)
    int common_line = 1;
    bool prelude = false;
  };
  std::vector<File> files_;
  // The section's text with its "//== include" lines replaced by the fragments (and `#line`s around them).
  // A cycle stops at depth 8 with an #error line, so it fails the compile with a readable message.
  std::string Expand(const KernelSource& section, int depth = 0) const;

  std::map<std::string, KernelSource> kernels_;
  std::map<std::string, KernelSource> fragments_;
};

}  // namespace sdgpu::gl
