#!/bin/sh
# Runs an aarch64 Linux program on this (x86-64) machine with qemu-user (Debian qemu-user), taking the dynamic
# loader and shared libraries (libc, libstdc++) from the cross toolchain's folder.
exec qemu-aarch64 -L /usr/aarch64-linux-gnu "$@"
