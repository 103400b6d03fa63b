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
python3 bench/memory_table.py "$OUT" r 5
