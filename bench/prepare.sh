#!/usr/bin/env bash
# Build the H200 benchmark kit HERE (the device has no network and gets only the repo + carried folders).
#
#   bench/prepare.sh [--b1 DIR] [--b2 DIR] [--dest DIR] [--lib PATH] [--models LIST] [--skip-downloads]
#
#   --b1 DIR     batch-1 conversion with unet + vae_decoder   (default /work/h200/sd15_b1)
#   --b2 DIR     cfg-batch-2 conversion with unet             (default /work/h200/sd15_b2)
#   --dest DIR   kit folder                                   (default .h200): DIR/models (skeletons + kit.json),
#                DIR/lib/libsdgpu_delegate.so
#   --lib PATH   delegate to ship (default: the one sdlite loads, i.e. the installed build)
#   --models L   subset of unet_b1,unet_b2,vae_decoder
#   --wheels DIR / --debs DIR   download folders (default .whl / .gl, both carried as ignored paths)
#   --skip-downloads            no pip/apt downloads (offline tests)
#
# Weights never travel: float buffers are cut out (bench/weights.py) and refilled with seeded random
# values on the device. Prints the total carried size, which must stay under ~55 MiB with the repo.
set -euo pipefail

cd "$(dirname "$0")/.."
B1=/work/h200/sd15_b1
B2=/work/h200/sd15_b2
DEST=.h200
LIB=""
MODELS=unet_b1,unet_b2,vae_decoder
WHEELS=.whl
DEBS=.gl
DOWNLOAD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --b1) B1=$2; shift 2 ;;
    --b2) B2=$2; shift 2 ;;
    --dest) DEST=$2; shift 2 ;;
    --lib) LIB=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --wheels) WHEELS=$2; shift 2 ;;
    --debs) DEBS=$2; shift 2 ;;
    --skip-downloads) DOWNLOAD=0; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "prepare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
say() { echo "[prepare $(date +%H:%M:%S)] $*"; }

# 1. models: weight-less skeletons + kit.json (+ the conversions' manifests)
B2_ARG=()
[ -d "$B2" ] && B2_ARG=(--b2 "$B2")
say "packing $MODELS from $B1 ${B2_ARG[*]:-}"
PYTHONPATH=python:converter${PYTHONPATH:+:$PYTHONPATH} "$PY" -m bench.pack --b1 "$B1" "${B2_ARG[@]}" \
  --dest "$DEST/models" --models "$MODELS"

# 2. the native delegate, as built here (Release, no -march=native: it must run on the device's CPU)
if [ -z "$LIB" ]; then
  LIB=$(PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH} "$PY" -c "from sdlite import native; print(native.delegate_path())")
fi
mkdir -p "$DEST/lib"
cp -f "$LIB" "$DEST/lib/libsdgpu_delegate.so"
cp -f bench/setup.sh "$DEST/setup.sh"  # `source .h200/setup.sh` on the device (helpers, lab/)
NEEDS=$(objdump -T "$DEST/lib/libsdgpu_delegate.so" 2>/dev/null | grep -o 'GLIBC_[0-9.]*\|GLIBCXX_[0-9.]*' | sort -uV \
  | awk -F_ '{v[$1]=$2} END {for (k in v) printf "%s_%s ", k, v[k]}' || true)
say "delegate: $LIB -> $DEST/lib ($(du -h "$DEST/lib/libsdgpu_delegate.so" | cut -f1); needs ${NEEDS:-?})"

# 3. wheels the device lacks (Python 3.12, x86-64) and the OpenCL ICD loader / GL loader debs
if [ "$DOWNLOAD" = 1 ]; then
  mkdir -p "$WHEELS" "$DEBS"
  for spec in ai-edge-litert==2.3.0 diffusers==0.42.1 backports.strenum importlib_metadata; do
    stem=$(echo "${spec%%==*}" | tr '.-' '__')
    if ls "$WHEELS" | grep -qi "^${stem}-"; then continue; fi
    say "pip download $spec"
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d "$WHEELS" "$spec"
  done
  for pkg in ocl-icd-libopencl1 libegl1 libgles2 libglvnd0 libvulkan1; do  # libvulkan1: run.sh's vulkan stage
    if ls "$DEBS" | grep -q "^${pkg}_"; then continue; fi
    say "apt-get download $pkg"
    (cd "$DEBS" && apt-get download -q "$pkg")
  done
fi

# 4. what travels: the repo's tracked + unignored files, and the carried folders
du -sh "$DEST"/models/* "$DEST"/lib/* 2>/dev/null | sed 's/^/    /'
git ls-files -z -co --exclude-standard | "$PY" -c '
import os, sys
from pathlib import Path

def size(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else 0

repo = sum(os.path.getsize(f) for f in sys.stdin.read().split("\0") if f and os.path.isfile(f))
carried = {d: size(Path(d)) for d in sys.argv[1:]}
total = (repo + sum(carried.values())) / 2**20
print(f"[prepare] sizes: repo {repo / 2**20:.1f} MiB; " + ", ".join(f"{d} {b / 2**20:.1f} MiB" for d, b in carried.items()))
print(f"[prepare] TOTAL {total:.1f} MiB (limit ~55 MiB of the 64 MiB transfer budget)")
sys.exit(0 if total < 55 else 1)
' "$DEST" "$WHEELS" "$DEBS"
