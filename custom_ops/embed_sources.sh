#!/bin/sh
# Writes (to stdout) the C++ file that embeds one GPU backend's kernel program as one raw string literal, byte for
# byte what CMakeLists.txt writes at configure time (tests/builds/test_build_files.py compares the two):
#
#   embed_sources.sh opencl ROOT
#       '#define SD_API_OPENCL 1', then gpu/dialect/prelude.h, the files of gpu/kernel_sources.txt and those of
#       backends/opencl/kernel_sources.txt, each after a '// ---- <path>' line, with '#pragma once' removed
#   embed_sources.sh gl ROOT CPP GL_FILE...
#       the compute shaders that gpu/dialect/gen_glsl.py generates from gpu/kernel_sources.txt (CPP: the C
#       preprocessor command, e.g. "gcc -E"), then each GL-only GL_FILE after a '//== file <path>' line: four times,
#       ShaderSource() with float activation storage, ShaderSourceActHalf() with half (gen_glsl.py --act-half), and
#       their compact variants ShaderSourceCompact() / ShaderSourceActHalfCompact() (--compact)
#
# ROOT is the custom_ops/ folder; the lists' paths and GL_FILE are relative to it. A list line that starts with '#'
# is a comment (CMake's file(STRINGS ... REGEX "^[^#]")). The Bazel build runs this (custom_ops/BUILD).
set -eu

usage() {
  echo "usage: embed_sources.sh opencl ROOT | embed_sources.sh gl ROOT CPP GL_FILE..." >&2
  exit 2
}

[ $# -ge 2 ] || usage
mode=$1 root=$2
shift 2

listed() {  # listed LIST: the paths LIST names, one per line, each checked to exist
  grep -v -e '^#' -e '^$' "$root/$1" | while IFS= read -r f; do
    if [ ! -f "$root/$f" ]; then
      echo "embed_sources.sh: $1 names $f, which does not exist" >&2
      exit 1
    fi
    printf '%s\n' "$f"
  done
}

case $mode in
  opencl)
    [ $# -eq 0 ] || usage
    # Read the lists first, so that a missing file fails before anything is written.
    portable=$(listed gpu/kernel_sources.txt)
    opencl_only=$(listed backends/opencl/kernel_sources.txt)
    files="gpu/dialect/prelude.h
$portable
$opencl_only"
    printf 'namespace sdgpu::ocl {\nconst char* KernelSource() {\n  return R"SDGPUCL(#define SD_API_OPENCL 1\n'
    printf '%s\n' "$files" | while IFS= read -r f; do
      printf '// ---- %s\n' "$f"
      sed 's/#pragma once//g' "$root/$f"
      printf '\n'
    done
    printf ')SDGPUCL";\n}\n}  // namespace sdgpu::ocl\n'
    ;;
  gl)
    [ $# -ge 1 ] || usage
    cpp=$1
    shift
    kernels=$(listed gpu/kernel_sources.txt)
    # gen_glsl.py names each kernel file relative to --root after resolving symlinks (Bazel's sandbox links every
    # input): give it the real folder the sources live in.
    real_root=$(dirname "$(dirname "$(readlink -f "$root/gpu/kernel_sources.txt")")")
    for f in "$@"; do
      [ -f "$root/$f" ] || { echo "embed_sources.sh: $f does not exist" >&2; exit 1; }
    done
    library() {  # library FLAG...: the generated kernels (gen_glsl.py FLAG...), then the GL-only files
      # shellcheck disable=SC2086  # one kernel path per word
      (cd "$root" && python3 gpu/dialect/gen_glsl.py --cpp "$cpp" --prelude gpu/dialect/prelude.h \
        --runtime gpu/dialect/glsl_runtime.glsl --root "$real_root" --plain "$@" --out /dev/stdout $kernels)
      for f in $gl_files; do
        printf '//== file %s\n' "$f"
        cat "$root/$f"
        printf '\n'
      done
    }
    gl_files="$*"
    printf 'namespace sdgpu::gl {\nconst char* ShaderSource() {\n  return R"SDGPUGL('
    library
    printf ')SDGPUGL";\n}\nconst char* ShaderSourceActHalf() {\n  return R"SDGPUGL('
    library --act-half
    printf ')SDGPUGL";\n}\nconst char* ShaderSourceCompact() {\n  return R"SDGPUGL('
    library --compact
    printf ')SDGPUGL";\n}\nconst char* ShaderSourceActHalfCompact() {\n  return R"SDGPUGL('
    library --act-half --compact
    printf ')SDGPUGL";\n}\n}  // namespace sdgpu::gl\n'
    ;;
  *) usage ;;
esac
