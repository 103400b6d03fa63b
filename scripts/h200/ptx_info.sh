#!/bin/bash
# Dumps the OpenCL programs the NVIDIA driver built (PTX, one per kernel unit, through the delegate's persistent
# cache: program-*.sdc entries, common/disk_cache.h) and, when a ptxas is found on the machine (Triton ships one),
# the per-kernel register / spill report for sm_90.
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
              {"cache_dir": os.environ["OUT"] + "/ptx/cache", "cache_programs": "1"})
# each program entry: a 56-byte header (key bytes at [16, 24), little endian), the key, then the driver's binary
for k, entry in enumerate(sorted((Path(os.environ["OUT"]) / "ptx" / "cache").glob("program-*.sdc"))):
    raw = entry.read_bytes()
    key_len = int.from_bytes(raw[16:24], "little")
    (Path(os.environ["OUT"]) / "ptx" / f"unit{k}.clbin").write_bytes(raw[56 + key_len:])
PY
ls -la "$OUT/ptx"
PTXAS=$(find / -name ptxas -type f -not -path '/proc/*' 2>/dev/null | head -1)
echo "ptxas: ${PTXAS:-none}"
if [ -n "$PTXAS" ]; then
  for f in "$OUT"/ptx/*.clbin; do
    tr -d '\000' < "$f" > /tmp/prog.ptx  # the driver's binary ends in a NUL that ptxas rejects
    "$PTXAS" -arch=sm_90 -v -O3 /tmp/prog.ptx -o /tmp/ptx.cubin 2>> "$OUT/ptx/ptxas.txt"; echo "ptxas rc $?"
  done
  # one line per kernel: name, registers, spill bytes
  awk "/Compiling entry function/ {f=\$NF} /spill stores/ {sp=\$5} /Used [0-9]+ registers/ {print f, \$5, \"regs\", sp, \"spill\"}" \
    "$OUT/ptx/ptxas.txt" | grep "gemm_t\|conv_t\|attn_\|winograd\|group_norm" | head -80
fi
