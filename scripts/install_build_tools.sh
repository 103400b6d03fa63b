#!/usr/bin/env bash
# Build tools for the Bazel build and the aarch64 cross-build (docs/build.md), Debian/Ubuntu only:
#   bazel-bootstrap             Debian's Bazel 4.2.3; with WORKSPACE's local repositories it builds offline
#   crossbuild-essential-arm64  g++-aarch64-linux-gnu 12 and the aarch64 glibc / libstdc++ (under /usr/aarch64-linux-gnu)
#   qemu-user                   qemu-aarch64, which runs the aarch64 test programs on x86-64
# The OpenCL headers that both builds compile against come with scripts/install.sh (opencl-headers).
set -euo pipefail
PKGS="bazel-bootstrap crossbuild-essential-arm64 qemu-user file"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_build_tools.sh: needs apt-get (Debian/Ubuntu); install Bazel 4.2+, an aarch64-linux-gnu g++ and qemu-user by hand" >&2
  exit 1
fi
missing=""
for pkg in $PKGS; do dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"; done
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
