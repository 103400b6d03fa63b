#!/usr/bin/env bash
# Install sdconvert + sdlite (editable, with the native delegate built by scikit-build-core) and the CLIP BPE file.
# torch is pinned to 2.13.0 first: that is the local CPU wheel; any other version pulls GBs of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# OpenCL runtime for the delegate's "opencl" backend (PoCL = CPU OpenCL device, used by CI); Debian/Ubuntu only.
OPENCL_PKGS="pocl-opencl-icd ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-headers"
# EGL + OpenGL ES loaders (glvnd) and Mesa's llvmpipe driver for the "gl" backend (CI runs it on llvmpipe;
# on NVIDIA machines the driver's own EGL vendor library is used instead of Mesa's). Nothing is needed at
# build time: the delegate dlopen()s libEGL.so.1 / libGLESv2.so.2.
GL_PKGS="libegl1 libgles2 libegl-mesa0 libgl1-mesa-dri"
if command -v apt-get >/dev/null 2>&1; then
  missing=""
  for pkg in $OPENCL_PKGS $GL_PKGS; do dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"; done
  if [ -n "$missing" ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
  fi
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
$PY -m pip install -q "torch==2.13.0"
$PY -m pip install -q "scikit-build-core>=0.10" "cmake>=3.18" ninja
# --no-build-isolation: reuse the scikit-build-core above instead of fetching a fresh build env each install.
$PY -m pip install -q --no-build-isolation -e ".[convert,test]"
$PY scripts/fetch_clip_bpe.py >/dev/null
echo "sdconvert installed: $(command -v sdconvert)"
