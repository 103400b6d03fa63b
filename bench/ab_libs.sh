#!/bin/bash
# Two delegate builds side by side on the kit's models, alternating (A B A B) in one device call:
#   AB_LIBS=".h200/lib/ab_old.so .h200/lib/ab_new.so" AB_MODELS=unet_b1,unet_b2 AB_VARIANTS=fused+winoauto \
#     bash bench/ab_libs.sh
# (after `source .h200/setup.sh`). Per run: device ms per step from the event profile and the wall median
# (profiling on), with the per-op-type split; raw JSON under $OUT/ab-<round>-<lib>.
set -u
ROUNDS=${AB_ROUNDS:-2}
for round in $(seq 1 "$ROUNDS"); do
  for lib in ${AB_LIBS}; do
    name=$(basename "$lib" .so)
    echo "== round $round: $name"
    python3 -m bench.opencl_gemm_bench --lib "$lib" --out "$OUT/ab-$round-$name" --phases models \
      --models "${AB_MODELS:-unet_b1}" --variants "${AB_VARIANTS:-fused+winoauto}" --runs "${AB_RUNS:-20}" \
      --deadline-s 200 --model-share 1.0 2>&1 | grep -E "device|SdConv2DWinograd|FULLY_CONNECTED|SdGroupNorm|ADD |CONV_2D|SdAttention|SdGelu|ERROR"
  done
done
