#!/bin/bash
# Dumps the OpenCL program the NVIDIA driver built (PTX, through the delegate's binary cache) and, when a ptxas
# is found on the machine (Triton ships one), its per-kernel register / spill report for sm_90.
#   bash scripts/h200/ptx_info.sh  (on the device, after `source .h200/setup.sh`; writes $OUT/ptx)
set -u
mkdir -p "$OUT/ptx"
python3 - <<'PY'
import os, sys
from pathlib import Path
import numpy as np
sys.path[:0] = ["tests/native", "scripts"]
from opencl_session import timed_session
from tflite_gemm_models import fully_connected_model
x = np.ones((1, 64, 64), np.float32)
timed_session(".h200/lib/libsdgpu_delegate.so", fully_connected_model(x.shape, np.ones((64, 64), np.float32), None),
              {"x": x}, Path(os.environ["OUT"]) / "ptx" / "profile.json", 1, 1,
              {"opencl_cache_dir": os.environ["OUT"] + "/ptx"})
PY
ls -la "$OUT/ptx"
PTXAS=$(find / -name ptxas -type f -not -path '/proc/*' 2>/dev/null | head -1)
echo "ptxas: ${PTXAS:-none}"
if [ -n "$PTXAS" ]; then
  for f in "$OUT"/ptx/*.clbin; do
    tr -d '\000' < "$f" > /tmp/prog.ptx  # the driver's binary ends in a NUL that ptxas rejects
    "$PTXAS" -arch=sm_90 -v -O3 /tmp/prog.ptx -o /tmp/ptx.cubin 2> "$OUT/ptx/ptxas.txt"; echo "ptxas rc $?"
  done
  # one line per kernel: name, registers, spill bytes
  awk "/Compiling entry function/ {f=\$NF} /spill stores/ {sp=\$5} /Used [0-9]+ registers/ {print f, \$5, \"regs\", sp, \"spill\"}" \
    "$OUT/ptx/ptxas.txt" | grep "gemm_t\|conv_t\|attn_\|winograd\|group_norm" | head -80
fi
