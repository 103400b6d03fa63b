#!/usr/bin/env bash
# Install everything, then run the test suite (tiny models; SDCONVERT_LARGE=1 adds the full-size SD1.5 tests), then
# the native build checks (scripts/test_native_builds.sh: Bazel, aarch64 cross-build and tests under qemu). Arguments
# go to pytest. Exits with pytest's status when it failed, else with the build checks' status.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/install_build_tools.sh
rc=0
"${PYTHON:-python3}" -m pytest "$@" || rc=$?
brc=0
bash scripts/test_native_builds.sh || brc=$?
if [ "$rc" -ne 0 ]; then exit "$rc"; fi
exit "$brc"
