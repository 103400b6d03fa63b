#!/usr/bin/env bash
# The stock LiteRT GPU accelerator (ML Drift over Vulkan/WebGPU, shipped in ai-edge-litert) on the H200:
# the plain SD1.5 UNet (b1) and its `--fuse --target litert` variant (issue #3: forms the stock GPU runs),
# through `sdlite bench --backend litert-gpu`, each in its own process under a timeout (it may crash).
# Run THERE from the repo root, carrying .h200 .whl .gl (.gl must hold libvulkan1). Writes $OUT/litert_gpu.log.
set -uo pipefail
source .h200/setup.sh
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
W=/tmp/litert-gpu; mkdir -p "$W"
python3 -m bench.weights refill .h200/models/unet_b1.tflite.gz "$W/unet_plain.tflite" --seed 0
python3 - "$W" <<'PY'
import sys
from pathlib import Path
from sdconvert.export.optimize import GraphOptions, optimize
w = Path(sys.argv[1])
print(optimize(w / "unet_plain.tflite", GraphOptions(fuse=True, target="litert"), print, dst=w / "unet_litert.tflite")["fusion"])
PY
for v in plain litert; do
  echo "=== unet b1 $v on litert-gpu"
  timeout 200 python3 -m sdlite bench "$W/unet_$v.tflite" --backend litert-gpu --num_runs 3 --warmup_runs 1 2>&1 | tail -25
  echo "exit status: ${PIPESTATUS[0]} (124 = timeout, 139 = segfault)"
done 2>&1 | tee "${OUT:-/tmp}/litert_gpu.log"
