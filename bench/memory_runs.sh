#!/usr/bin/env bash
# On the GPU machine, after `H200_STAGES=prepare,e2e H200_E2E_VARIANTS=VARIANT ... bench/run.sh`:
#
#   bench/memory_runs.sh [VARIANT]     (default fused)
#
# the e2e folder VARIANT generated five ways -- default, --low-memory, --low-memory with weights_fp16:1, --low-memory
# with activations_fp16:1, --low-memory with both -- with each run's peak GPU memory (delegate accounting), per-model
# GPU bytes, peak host RSS, start to PNG, UNet step and PSNR against the default's image. Writes $OUT/img{1..5}.png,
# mem{1..5}.json; prints one line per run (docs/benchmarks-history/2026-11-29-h200-half-activation-storage.md, call 4).
source .h200/setup.sh >/dev/null 2>&1
export SDLITE_DELEGATE_PATH=$PWD/.h200/lib/libsdgpu_delegate.so
V=${1:-fused}
F=/tmp/h200-work/e2e/$V; C=/tmp/h200-work/e2e/cache/$V
i=0
for spec in "|cache_dir:$C" "--low-memory|cache_dir:$C" "--low-memory|cache_dir:$C;weights_fp16:1" \
            "--low-memory|cache_dir:$C;activations_fp16:1" "--low-memory|cache_dir:$C;weights_fp16:1;activations_fp16:1"; do
  i=$((i+1)); lm=${spec%%|*}; opts=${spec#*|}
  timeout 60 python3 -m sdlite generate $F -p "a photo of an astronaut riding a horse on mars" --steps 20 --seed 0 \
    --backend opencl --json --no-progress -o $OUT/img$i.png $lm --delegate_options "$opts" > $OUT/mem$i.json 2>$OUT/mem$i.err
  echo "run $i ($lm $opts): rc $?"
done
python3 bench/memory_table.py "$OUT" mem 5
