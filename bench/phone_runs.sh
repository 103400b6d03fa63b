#!/usr/bin/env bash
# On the GPU machine, after `H200_STAGES=prepare,e2e H200_E2E_VARIANTS=fused+winoauto ... bench/run.sh
# --winograd-profile adreno740` (the graph `sdconvert --phone` makes):
#
#   bench/phone_runs.sh
#
# the e2e folder generated five ways -- default, `--phone` (a cold start of the half programs), `--phone` again,
# `--phone` with release_weight_pages:0, `--phone` on the same folder with fp16 weight-only files -- as fresh
# processes, each with its peak GPU memory (delegate accounting), per-model GPU bytes, peak host RSS (and its make-up
# at the peak: bench/rss_poll.py), start to PNG, UNet step and PSNR against the default's image. Writes
# $OUT/img{1..5}.png, r{1..5}.json; prints one line per run (BENCHMARKS.md, "The phone preset inside the budget").
source .h200/setup.sh >/dev/null 2>&1
export SDLITE_DELEGATE_PATH=$PWD/.h200/lib/libsdgpu_delegate.so
F=/tmp/h200-work/e2e/fused+winoauto; C=/tmp/h200-work/e2e/cache/fused+winoauto
F16=/tmp/h200-work/e2e/fp16-phone
( time python3 bench/fp16_copy.py $F $F16 ) > $OUT/fp16copy.log 2>&1 &
CP=$!
i=0
for spec in "$F||" "$F|--phone|" "$F|--phone|" "$F|--phone|;release_weight_pages:0" "F16|--phone|"; do
  i=$((i+1)); dir=${spec%%|*}; rest=${spec#*|}; flag=${rest%%|*}; extra=${rest#*|}
  if [ "$dir" = F16 ]; then wait $CP; dir=$F16; fi
  timeout 120 python3 bench/rss_poll.py python3 -m sdlite generate $dir -p "a photo of an astronaut riding a horse on mars" \
    --steps 20 --seed 0 --backend opencl --json --no-progress -o $OUT/img$i.png $flag \
    --delegate_options "cache_dir:$C$extra" > $OUT/r$i.json 2>$OUT/r$i.err
  echo "run $i ($dir $flag $extra): rc $? $(grep RSSPEAK $OUT/r$i.err)"
done
tail -5 $OUT/fp16copy.log
python3 - <<'PY'
import json, os, numpy as np
from PIL import Image
out = os.environ["OUT"]
ref = np.asarray(Image.open(f"{out}/img1.png")).astype(np.float64)
for i in range(1, 6):
    try:
        d = json.load(open(f"{out}/r{i}.json"))
    except Exception as e:
        print(i, "no json", e); continue
    m = d["memory"]; t = d["startup"]["timeline"]
    img = np.asarray(Image.open(f"{out}/img{i}.png")).astype(np.float64)
    mse = float(((img - ref) ** 2).mean())
    psnr = 99.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)
    print(i, "peak_gpu_MB", round(m["peak_gpu_bytes"] / 2**20, 1), "per model MB", {k: round(v / 2**20, 1) for k, v in m["gpu_bytes"].items()},
          "peak_rss_MB", round(m["peak_host_rss_bytes"] / 2**20, 1), "png_s", t.get("png_0"),
          "unet_step_ms", round(1e3 * (d["timings"]["unet_step_steady_mean_s"] or 0), 2), "PSNR_vs_1", round(psnr, 2))
PY
