#!/usr/bin/env bash
# `sdlite generate` (20 steps, 512x512, CFG 7.5) on the H200 with our OpenCL backend (issue #6 acceptance 4).
# Needs .h200/gen/ made HERE: manifest.json, tokenizer/, scheduler/ of an sd15 fp32 conversion plus
# `scripts/h200/weights.py zero` skeletons of its four models. Weights are refilled with random values on the
# device, so the manifest's sha256 entries are dropped. Run THERE from the repo root; writes $OUT/sd15_h200.{png,json}.
set -uo pipefail
source .h200/setup.sh
G=/tmp/gen; rm -rf "$G"; mkdir -p "$G"; cp -r .h200/gen/manifest.json .h200/gen/tokenizer .h200/gen/scheduler "$G/"
for m in text_encoder unet vae_decoder vae_encoder; do
  python3 scripts/h200/weights.py refill ".h200/gen/$m.tflite.gz" "$G/$m.tflite" --seed 0
done
python3 - "$G/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for spec in m["models"].values():
    spec.pop("sha256", None)
json.dump(m, open(sys.argv[1], "w"), indent=1)
PY
export SDLITE_DELEGATE_PATH=${SDLITE_DELEGATE_PATH:-$PWD/.h200/lib/libsdgpu_delegate.so}
python3 -m sdlite generate "$G" --prompt "a photo of an astronaut riding a horse" --steps 20 --seed 0 \
  --backend opencl --json --no-progress -o "${OUT:-/tmp}/sd15_h200.png" > "${OUT:-/tmp}/sd15_h200.json"
echo "exit status: $?"
python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['timings']; print({k: (round(v,3) if isinstance(v,float) else v) for k,v in t.items() if k!='unet_step_s'})" "${OUT:-/tmp}/sd15_h200.json"
