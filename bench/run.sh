#!/usr/bin/env bash
# Run the H200 benchmark kit ON THE DEVICE, from the repo root; everything goes to $OUT.
#
#   OUT=/path bench/run.sh [bench.py args...]
#
# Stages of this script (each logs, and a failure never stops the next one):
#   wheels   install the carried .whl/*.whl into /tmp/site (no network, --no-deps)
#   bytecode compile the tree's and the wheels' Python files (.pyc), as an install does
#   opencl   make an OpenCL ICD loader + NVIDIA ICD available (carried ocl-icd deb; /etc/OpenCL/vendors)
#   gl       (only with H200_GL=1 or gl in H200_BACKENDS) EGL/GLES loaders from .gl/ + NVIDIA's EGL vendor file
#   vulkan   the Vulkan loader (carried libvulkan1 deb) + NVIDIA's ICD (VK_DRIVER_FILES) for the stock LiteRT GPU
#            accelerator (WebGPU over Vulkan); without it that row fails with "No adapters found"
#   info     nvidia-smi -L, the OpenCL devices (bench/cl_info.py)
#   bench    python3 -m bench.bench "$@" (its own stages: H200_STAGES, H200_MODELS, H200_VARIANTS,
#            H200_BACKENDS, H200_PROFILE, H200_DEADLINE_S; see bench.py --help)
# H200_SKIP="wheels gl" skips stages of this script. The whole call is budgeted to ~9 minutes: bench.py stops
# starting rows H200_DEADLINE_S seconds (default 510) after this script started, and gives each row at most
# the time left (a row in flight is killed at the deadline, its partial results are lost, the others kept).
set -uo pipefail

cd "$(dirname "$0")/.."
START=$(date +%s)
OUT=${OUT:-$PWD/h200-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
SKIP=" ${H200_SKIP:-} "
SITE=${H200_SITE:-/tmp/site}
say() { echo "[run.sh $(date +%H:%M:%S) +$(( $(date +%s) - START ))s] $*"; }
stage() {  # stage NAME FUNCTION: run unless skipped; log the status, never abort
  if [[ "$SKIP" == *" $1 "* ]]; then say "stage $1: skipped (H200_SKIP)"; return 0; fi
  say "stage $1"
  "$2"
  local rc=$?
  [ $rc -eq 0 ] || say "stage $1 FAILED (rc=$rc), continuing"
  return 0
}

do_wheels() {
  ls .whl/*.whl >/dev/null 2>&1 || { say "no wheels in .whl/"; return 1; }
  if [ -f "$SITE/.installed" ] && [ "$(cat "$SITE/.installed")" = "$(ls .whl/*.whl | xargs -n1 basename | sort | tr '\n' ' ')" ]; then
    say "wheels already installed in $SITE"; return 0
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" --upgrade .whl/*.whl || return 1
  ls .whl/*.whl | xargs -n1 basename | sort | tr '\n' ' ' > "$SITE/.installed"
}

# Bytecode for the carried tree and wheels, as an install has: the device's environment sets PYTHONDONTWRITEBYTECODE,
# so without it every process the kit starts compiled sdlite and LiteRT's 2 MB schema module again (0.5 s of each
# `sdlite generate` start on the H200, measured).
do_bytecode() {
  python3 -m compileall -q -j 0 python converter bench "$SITE" > /dev/null || return 1
}

do_opencl() {
  local icd dirs
  # the usual places first (/usr/local/nvidia is a read-only driver mount on some machines), then everywhere
  dirs=$(ls -d /usr/local/nvidia /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/lib /usr/lib 2>/dev/null)
  icd=$(find $dirs -name 'libnvidia-opencl.so.1*' 2>/dev/null | head -n1)
  if [ -z "$icd" ]; then
    icd=$(find / \( -path /proc -o -path /sys \) -prune -o -name 'libnvidia-opencl.so*' -print 2>/dev/null | head -n1)
  fi
  [ -n "$icd" ] || { say "no libnvidia-opencl.so found"; return 1; }
  say "NVIDIA OpenCL ICD: $icd"
  if ! ldconfig -p | grep -q 'libOpenCL.so.1'; then
    local deb
    deb=$(ls .gl/ocl-icd-libopencl1_*.deb 2>/dev/null | head -n1)
    [ -n "$deb" ] || { say "libOpenCL.so.1 missing and no ocl-icd deb in .gl/"; return 1; }
    dpkg -x "$deb" / && ldconfig || return 1
    say "installed the ICD loader from $deb"
  fi
  mkdir -p /etc/OpenCL/vendors
  if ! grep -qs "libnvidia-opencl" /etc/OpenCL/vendors/*.icd; then
    echo "$icd" > /etc/OpenCL/vendors/nvidia.icd
  fi
}

install_libs() {  # install_libs PKG:LIB ...: unpack .gl/PKG_*.deb into / for each LIB the linker cache lacks
  local spec pkg lib deb
  for spec in "$@"; do
    pkg=${spec%%:*}; lib=${spec#*:}
    ldconfig -p | grep -q "$lib" && continue
    deb=$(ls .gl/${pkg}_*.deb 2>/dev/null | head -n1)
    [ -n "$deb" ] || { say "$lib missing and no $pkg deb in .gl/"; return 1; }
    dpkg -x "$deb" / || return 1
    say "installed $lib from $deb"
  done
  ldconfig
}

do_gl() {
  install_libs libglvnd0:libGLdispatch.so.0 libegl1:libEGL.so.1 libgles2:libGLESv2.so.2 || return 1
  if ! ls /usr/share/glvnd/egl_vendor.d/*nvidia*.json >/dev/null 2>&1; then
    local egl
    egl=$(find / \( -path /proc -o -path /sys \) -prune -o -name 'libEGL_nvidia.so.0' -print 2>/dev/null | head -n1)
    [ -n "$egl" ] || { say "no libEGL_nvidia.so.0 found"; return 1; }
    mkdir -p /usr/share/glvnd/egl_vendor.d
    printf '{"file_format_version": "1.0.0", "ICD": {"library_path": "%s"}}\n' "$egl" \
      > /usr/share/glvnd/egl_vendor.d/10_nvidia.json
    say "EGL vendor file -> $egl"
  fi
}

do_vulkan() {
  local icd
  # NVIDIA's Vulkan ICD is libGLX_nvidia.so.0, which needs glvnd's libGLdispatch: without it the loader finds
  # no adapter ("No adapters found")
  install_libs libvulkan1:libvulkan.so.1 libglvnd0:libGLdispatch.so.0 libegl1:libEGL.so.1 libgles2:libGLESv2.so.2 ||
    return 1
  if [ -z "${VK_DRIVER_FILES:-}" ]; then
    icd=$(ls /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd*.json \
          /etc/vulkan/icd.d/nvidia_icd*.json 2>/dev/null | head -n1)
    [ -n "$icd" ] || { say "no NVIDIA Vulkan ICD file found"; return 1; }
    export VK_DRIVER_FILES=$icd
  fi
  say "VK_DRIVER_FILES=$VK_DRIVER_FILES ($(grep -o '"library_path"[^,]*' "$VK_DRIVER_FILES"))"
}

do_info() {
  nvidia-smi -L || say "nvidia-smi failed"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
  python3 -m bench.cl_info
}

export PYTHONPATH="python:converter:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export SDLITE_DELEGATE_PATH=${SDLITE_DELEGATE_PATH:-$PWD/.h200/lib/libsdgpu_delegate.so}
export H200_T0=${H200_T0:-$START}
export H200_COMMAND="${H200_COMMAND:-$(env | grep '^H200_\(STAGES\|MODELS\|VARIANTS\|BACKENDS\|PROFILE\|CPU_VARIANTS\|TORCH_DEVICE\|SKIP\|GL\)=' | sort | tr '\n' ' ')$0 $*}"

stage wheels do_wheels
stage bytecode do_bytecode
stage opencl do_opencl
if [ "${H200_GL:-0}" = 1 ] || [[ "${H200_BACKENDS:-}" == *gl* ]] || [[ "$*" == *gl* ]]; then stage gl do_gl; fi
[[ "${H200_STAGES:-litert-gpu}" == *litert-gpu* ]] && stage vulkan do_vulkan
stage info do_info

export H200_DEADLINE_S=${H200_DEADLINE_S:-510}  # counted from H200_T0, i.e. including the set-up above
say "stage bench (deadline ${H200_DEADLINE_S}s)"
python3 -m bench.bench --out "$OUT" "$@"  # prints the markdown table last
exit $?
