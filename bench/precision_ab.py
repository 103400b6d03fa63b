"""Weight-only precision A/B on the device: one refilled kit model as exported (fp32) and re-exported with fp16 / int8
weights (sdconvert's precision pass: constants behind DEQUANTIZE nodes), each run through one or more delegate builds
with `sdlite bench` (one process per row, opencl backend), side by side in one call.

    python3 -m bench.precision_ab --model /tmp/h200-work/models/unet_b1/fused+winoauto.tflite \\
        --precision fp16 --lib new=.h200/lib/libsdgpu_delegate.so --lib old=.h200/lib_old/libsdgpu_delegate.so \\
        --out $OUT/precision.json

Prints the rows of one markdown table (precision | delegate | median ms | first run ms | arena MB | GPU weights MB |
the delegate's set-up host ms: pack / upload / tune, "-" for a build without those stats) and writes every
`sdlite bench --json` result to --out. Needs the kit's environment (after `source .h200/setup.sh`).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bench(model: Path, lib: Path, runs: int, timeout_s: float, options: str = "") -> dict:
    env = {**os.environ, "SDLITE_DELEGATE_PATH": str(lib.resolve())}
    cmd = [sys.executable, "-m", "sdlite", "bench", f"{model}@opencl", "--json", "--num_runs", str(runs),
           "--warmup_runs", "2"] + (["--delegate_options", options] if options else [])
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"rc {proc.returncode}"]}
    return json.loads(proc.stdout)["results"][0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="a float32 .tflite (e.g. a refilled kit model)")
    ap.add_argument("--precision", default="fp16", choices=("fp16", "int8"))
    ap.add_argument("--lib", action="append", required=True, help="LABEL=path/to/libsdgpu_delegate.so (repeatable)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--timeout-s", type=float, default=180.0, help="per bench row")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    libs = [(s.split("=", 1)[0], Path(s.split("=", 1)[1])) for s in args.lib]
    for label, lib in libs:
        if not lib.is_file():
            raise SystemExit(f"--lib {label}: no file {lib}")
    sys.path.insert(0, str(ROOT / "converter"))
    from sdconvert.export.precision import convert_weights

    quant = args.model.with_name(f"{args.model.stem}.{args.precision}.tflite")
    t0 = time.time()
    report = convert_weights(args.model, quant, args.precision)
    print(f"{args.precision} export: {report.tensors} constants behind DEQUANTIZE, {report.bytes_before / 1e6:.0f} -> "
          f"{report.bytes_after / 1e6:.0f} MB in {time.time() - t0:.0f} s", flush=True)
    rows = []
    for model, precision in ((args.model, "fp32"), (quant, args.precision)):
        for label, lib in libs:
            r = bench(model, lib, args.runs, args.timeout_s)
            rows.append({"model": str(model), "precision": precision, "lib": label, "result": r})
            d = r.get("device") or {}
            keys = ("setup_weights_host_us", "setup_weights_upload_us", "setup_tuning_us")
            setup = " / ".join(f"{d[k] / 1e3:.0f}" for k in keys) if all(d.get(k, -1) >= 0 for k in keys) else "-"
            print(f"| {precision} | {label} | " + (f"{r['timings_us']['median'] / 1e3:.2f} | {r['first_run_us'] / 1e3:.0f}"
                  f" | {d.get('arena_mb', 0):.1f} | {d.get('weight_mb', 0):.1f} | {setup} |" if "error" not in r
                  else f"error: {r['error']} | | | | |"), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"model": str(args.model), "precision": args.precision, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
