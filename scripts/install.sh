#!/usr/bin/env bash
# Install sdconvert + sdlite (editable, with the native delegate built by scikit-build-core) and the CLIP BPE file.
# torch is pinned to 2.13.0 first: that is the local CPU wheel; any other version pulls GBs of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1
$PY -m pip install -q "torch==2.13.0"
$PY -m pip install -q "scikit-build-core>=0.10" "cmake>=3.18" ninja
# --no-build-isolation: reuse the scikit-build-core above instead of fetching a fresh build env each install.
$PY -m pip install -q --no-build-isolation -e ".[convert,test]"
$PY scripts/fetch_clip_bpe.py >/dev/null
echo "sdconvert installed: $(command -v sdconvert)"
