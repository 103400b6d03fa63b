#!/usr/bin/env bash
# Per-op error table of the SD1.5 fused + Winograd auto UNet on the GPU machine (issue #38 acceptance 3): every
# Sd* op and every Winograd conv against the unfused graph it replaced, on the CPU (our delegate's CPU kernels)
# and on OpenCL and GL (NVIDIA), plus each backend's whole-UNet error. Run ON THE DEVICE from the repo root, with
# the H200 kit carried (.h200 .whl .gl, see bench/README.md):
#
#   OUT=$OUT bench/op_errors.sh                      # cpu,opencl,gl in one call (not yet timed there)
#   OP_BACKENDS=cpu OUT=$OUT bench/op_errors.sh      # split over two calls if the 10-minute limit bites
#   OP_BACKENDS=opencl,gl OUT=$OUT bench/op_errors.sh
#
# 1. run.sh's set-up (wheels, OpenCL ICD, EGL/GLES) and bench.py's prepare stage for the plain unet_b1 only: the
#    kit's skeleton refilled with seeded random weights (WORK/models/unet_b1/plain.tflite; kept while the machine
#    stays warm, so a second call reuses it).
# 2. sdconvert optimize plain.tflite --fuse --winograd auto --device-profile h200 --verify --verify-backend ...
#    --json: $OUT/op_errors.json (the whole JSON: fusion, Winograd plan, op_errors), $OUT/op_errors.md (the
#    table as printed, for BENCHMARKS.md), $OUT/op_errors.log (progress).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/h200-out}
WORK=${H200_WORK:-/tmp/h200-work}
BACKENDS=${OP_BACKENDS:-cpu,opencl,gl}
mkdir -p "$OUT"
PLAIN="$WORK/models/unet_b1/plain.tflite"
# set-up + refill (the prepare stage reuses WORK's refilled model while the machine stays warm)
H200_STAGES=prepare H200_MODELS=unet_b1 H200_VARIANTS=plain H200_CPU_VARIANTS=plain H200_BACKENDS=opencl,gl \
  OUT="$OUT/prepare" bench/run.sh > "$OUT/op_errors.log" 2>&1
[ -f "$PLAIN" ] || { echo "no $PLAIN (see $OUT/op_errors.log)"; tail -20 "$OUT/op_errors.log"; exit 1; }
export PYTHONPATH="python:converter:${H200_SITE:-/tmp/site}" PYTHONUNBUFFERED=1
export SDLITE_DELEGATE_PATH=${SDLITE_DELEGATE_PATH:-$PWD/.h200/lib/libsdgpu_delegate.so}
mkdir -p /tmp/opcheck
/usr/bin/time -v python3 -m sdconvert.cli optimize "$PLAIN" --fuse --winograd auto --device-profile h200 \
  --verify --verify-backend "$BACKENDS" --json --overwrite -o /tmp/opcheck/unet-fw.tflite \
  > "$OUT/op_errors.json" 2>> "$OUT/op_errors.log"
rc=$?
echo "sdconvert optimize exit status: $rc"
python3 - "$OUT/op_errors.json" "$OUT/op_errors.md" <<'PY'
import json, sys
sys.path[:0] = ["converter"]
from sdconvert.opcheck.report import Err, OpReport, OpRow
(d,) = (m["op_errors"] for m in json.load(open(sys.argv[1]))["models"].values())  # one file: keyed by its stem
r = OpReport("unet", tuple(d["backends"]))
for row in d["rows"]:
    r.rows.append(OpRow(row["index"], row["op"], row["detail"], row["tensor"], row["location"], tuple(row["shape"]),
                        {b: Err(**e) for b, e in row["errors"].items()}, row.get("fit_residual"), row.get("problem", "")))
r.end_to_end = {b: {k: Err(**e) for k, e in outs.items()} for b, outs in d["end_to_end"].items()}
open(sys.argv[2], "w").write(r.format_table() + "\n")
print("\n".join(r.summary_lines(top=5)))
PY
exit $rc
