# CMake toolchain file: aarch64 Linux with Debian's cross compiler (crossbuild-essential-arm64, g++-aarch64-linux-gnu
# 12; target headers and libraries under /usr/aarch64-linux-gnu).
#
#   cmake -S custom_ops -B build/aarch64 -G Ninja --toolchain custom_ops/cmake/aarch64-linux-gnu.cmake
#   ninja -C build/aarch64          # -> libsdgpu_delegate.so, ELF ARM aarch64
#
# (or `cmake --preset aarch64-linux-gnu` from custom_ops/, CMakePresets.json). Run its programs on x86-64 with
# `qemu-aarch64 -L /usr/aarch64-linux-gnu PROGRAM` (Debian qemu-user). The OpenCL headers come from the build
# machine's Khronos copy when the target folder has none (CMakeLists.txt).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(SDGPU_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${SDGPU_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${SDGPU_CROSS_TRIPLE}-g++)

set(CMAKE_FIND_ROOT_PATH /usr/${SDGPU_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# try_run / tests of the build tree run under qemu-user.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/${SDGPU_CROSS_TRIPLE})
