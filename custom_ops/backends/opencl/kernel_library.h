// The OpenCL kernel library (the concatenated .cl sources, KernelSource()) split into top-level units, so a device
// compiles only the kernels a model uses instead of all ~140 (NVIDIA: ~150 s for the whole library on a cold driver
// cache; PoCL: tens of CPU seconds to parse it, then machine code for every kernel when its binary is read).
//
// A kernel unit is one top-level construct that defines kernels:
//   * a kernel definition:    __kernel [__attribute__((...))] void NAME(...) { ... }
//   * a macro instantiation:  MACRO(args) at the start of a line, where MACRO is a function-like macro of the
//                             library whose expansion defines kernels (SD_GEMM_TILED(gemm_t64x64, ...) defines
//                             gemm_t64x64 and its _gg / _ln / _gg_ln twins); the names are found by expanding it
//                             (parameters, ## pasting, nested macros of the library).
// Everything else -- directives, macro definitions, helper functions, constants, comments -- is shared and kept
// in every composed program. Top-level #if / #ifdef / #elif / #else / #endif are evaluated with the build
// options' -D macros and the library's own object-like #defines (C rules: an unknown identifier is 0), so Has()
// answers "does the program built with these options define this kernel" without compiling anything (the
// NVIDIA-only tensor-core kernels exist only under SDGPU_NV_PTX). tests/native/test_opencl_kernel_library.py
// checks the names against a C preprocessor's expansion of the library for each option set.
//
// Parse fails (and the device builds the whole library, as before) on anything it does not understand: an
// unbalanced construct, an #if it cannot evaluate, a macro expanding too deep.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace sdgpu::ocl {

class KernelLibrary {
 public:
  // `defines`: the build options' -D macros (DefinesOf).
  static Status Parse(const std::string& source, const std::map<std::string, std::string>& defines,
                      KernelLibrary* out);

  bool Has(const std::string& kernel) const { return unit_of_.count(kernel) != 0; }
  // The unit defining `kernel`, or -1.
  int UnitOf(const std::string& kernel) const;
  // The kernels unit `unit` defines (under the options).
  const std::vector<std::string>& KernelsOf(int unit) const { return units_.at(static_cast<size_t>(unit)).kernels; }
  // Every kernel, in library order.
  const std::vector<std::string>& kernel_names() const { return names_; }
  size_t num_units() const { return units_.size(); }
  // A program: the library with every kernel unit not in `units` cut out (line breaks kept, so compiler messages
  // keep their line numbers).
  std::string Compose(const std::set<int>& units) const;
  // The program of one unit: the library up to the end of that unit, every other kernel unit cut out, then the
  // #endif of each #if still open there. C code only uses what is declared before it, so nothing after the unit is
  // needed -- except the definition of a function declared before it, defined after it and used by the unit or a
  // function before it (the dialect prelude declares nv_ptx.cl's primitives, which follow the portable kernels):
  // then the program goes on to that definition. The source is the same whatever else a model uses (the attention helpers at the end of the
  // portable kernels are the costliest part to parse).
  std::string ComposeUnit(int unit) const;

 private:
  struct Unit {
    size_t begin = 0, end = 0;  // [begin, end) in source_
    std::vector<std::string> kernels;
    int open_ifs = 0;  // #if blocks open at `end`
    std::set<std::string> uses;  // identifiers of its expansion
  };
  struct Decl {  // a function prototype or definition outside the kernel units
    size_t end = 0;
    std::string name;
    bool prototype = false;
    int open_ifs = 0;
    std::set<std::string> uses;  // a definition's identifiers, macros expanded
  };
  std::string source_;
  std::vector<Unit> units_;
  std::vector<Decl> decls_;  // in source order
  std::vector<std::string> names_;
  std::map<std::string, int> unit_of_;
};

// The -D macros of an OpenCL build-option string: "-DNAME" (value "1"), "-DNAME=value", "-D NAME[=value]".
std::map<std::string, std::string> DefinesOf(const std::string& options);

}  // namespace sdgpu::ocl
