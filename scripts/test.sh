#!/usr/bin/env bash
# Install everything, then run the test suite (tiny models; SDCONVERT_LARGE=1 adds the full-size SD1.5 tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec "${PYTHON:-python3}" -m pytest "$@"
