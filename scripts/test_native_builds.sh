#!/usr/bin/env bash
# The build checks that scripts/test.sh runs after the pytest suite (docs/build.md):
#   1. bazel test //...                  the delegate built by Bazel (offline), its native cc_tests, a pytest subset
#   2. bazel test --config=aarch64 ...   the aarch64 delegate and the native tests, run under qemu-aarch64
#   3. CMake aarch64 cross-build         custom_ops/cmake/aarch64-linux-gnu.cmake: configure + the ABI checks
#   4. the kernel programs Bazel embedded == those CMake embedded (byte for byte)
# The aarch64 outputs must be ARM aarch64 ELF files (`file`). Prints the seconds each step took.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_build_tools.sh

step() {  # step NAME COMMAND...: runs it, prints its time
  local name=$1 start=$SECONDS
  shift
  echo "== $name"
  "$@"
  echo "== $name: $((SECONDS - start)) s"
}

expect_aarch64() {  # the library at $1 is an aarch64 ELF shared object
  local what
  what=$(file -L "$1")
  echo "$what"
  case "$what" in
    *"ELF 64-bit LSB shared object, ARM aarch64"*) ;;
    *) echo "test_native_builds.sh: $1 is not an aarch64 shared object" >&2; return 1 ;;
  esac
}

# The Bazel server is only needed here: stop it when done, so that it does not hold memory (or the output base lock).
trap 'bazel shutdown >/dev/null 2>&1 || true' EXIT

step "bazel test //... (host)" bazel test //...
step "bazel test --config=aarch64 //tests/native_cc/... (qemu-aarch64)" \
  bazel test --config=aarch64 //tests/native_cc/...
expect_aarch64 "$(bazel info --config=aarch64 bazel-bin 2>/dev/null)/custom_ops/libsdgpu_delegate.so"

# CMake's toolchain file: configure (CMake links a test program with the cross compiler; the kernel programs are
# written) and compile the C ABI's static asserts through it. The whole library is cross-compiled and tested by
# Bazel above; compiling it a second time would add ~3 minutes here.
step "cmake aarch64 cross-build (configure, abi/abi_check.cc)" bash -c '
  cmake -S custom_ops -B build/aarch64 -G Ninja -DCMAKE_BUILD_TYPE=Release \
    --toolchain "$PWD/custom_ops/cmake/aarch64-linux-gnu.cmake" >/dev/null
  ninja -C build/aarch64 CMakeFiles/sdgpu_delegate.dir/abi/abi_check.cc.o >/dev/null'
what=$(file build/aarch64/CMakeFiles/sdgpu_delegate.dir/abi/abi_check.cc.o)
echo "$what"
case "$what" in
  *"ELF 64-bit LSB relocatable, ARM aarch64"*) ;;
  *) echo "test_native_builds.sh: the CMake cross-build did not compile for aarch64" >&2; exit 1 ;;
esac

# The kernel programs Bazel's genrules embedded are the bytes CMake embeds (here: the cross-build's configure step;
# the kernel dialect is preprocessed without target macros, so host and cross builds write the same files).
for f in opencl_kernel_source.cc gl_shader_source.cc; do
  cmp "$(bazel info bazel-bin 2>/dev/null)/custom_ops/$f" "build/aarch64/$f"
done
echo "Bazel and CMake embed the same kernel programs"

# Keep the shared Bazel disk cache (.bazelrc) from growing without end: entries written over 30 days ago go.
find ~/.cache/bazel-disk -type f -mtime +30 -delete 2>/dev/null || true
