"""Winograd tile per conv, measured on the GPU: what ``--tune --tune-backend opencl`` would choose against the
device profile's cost model, at every distinct 3x3 conv shape of the SD1.5 UNet (512x512), b1 and b2.

All candidates (direct, and the F2/F4/F6 the profile's backend runs in the Winograd domain) of all shapes run as one
delegated model (``sdconvert.winograd.tune``); each is timed by the delegate's device profile. The table gives
device ms per candidate, the model's pick and the measured pick; the totals weight every shape by how many UNet convs
have it, so "saved" is the device time per UNet step the measured plan would save over the model's plan (launch
gaps not included).

    python3 scripts/h200/wino_tune_lab.py --out $OUT/wino_tune.json                  # H200 (source .h200/setup.sh)
    python3 scripts/h200/wino_tune_lab.py --config tiny --backend opencl --batches 1  # PoCL here
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from sdconvert.export.configs import get_config
from sdconvert.winograd.cost import get_profile
from sdconvert.winograd.plan import make_plan, tile_label
from sdconvert.winograd.sd_shapes import unet_convs
from sdconvert.winograd.tune import tune


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="sd15")
    ap.add_argument("--profile", default="h200")
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--batches", default="1,2")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    cfg, prof = get_config(args.config), get_profile(args.profile)
    result = []
    for batch in (int(b) for b in args.batches.split(",")):
        specs = unet_convs(cfg, batch=batch)
        measured = tune(specs, repeats=args.repeats, warmup=args.warmup, backend=args.backend, profile=prof,
                        progress=lambda m: print(m, flush=True))
        model_plan = make_plan(specs, "auto", prof)
        tuned_plan = make_plan(specs, "auto", prof, measured=measured)
        counts = collections.Counter(s.shape_key() for s in specs)
        rows, total_model, total_tuned = [], 0.0, 0.0
        done = set()
        for dm, dt in zip(model_plan.decisions, tuned_plan.decisions):
            key = dm.spec.shape_key()
            if key in done or not dm.suitable:
                continue
            done.add(key)
            times = {t: measured[(key, t)] for t in dt.predicted if (key, t) in measured}
            n = counts[key]
            total_model += n * times[dm.tile]
            total_tuned += n * times[dt.tile]
            s = dm.spec
            rows.append({"shape": f"b{s.batch} {s.in_h}x{s.in_w} {s.in_c}->{s.out_c}", "convs": n,
                         "ms": {tile_label(t): round(v * 1e3, 4) for t, v in times.items()},
                         "model": tile_label(dm.tile), "measured": tile_label(dt.tile)})
        print(f"\n## b{batch}: device ms per candidate ({args.backend}, {args.repeats} invokes)\n")
        print("| shape | convs | " + " | ".join(("direct", "F2", "F4", "F6")) + " | model | measured |")
        print("|---|---:|---:|---:|---:|---:|---|---|")
        for r in rows:
            cells = " | ".join(f"{r['ms'][c]:.4f}" if c in r["ms"] else "-" for c in ("direct", "F2", "F4", "F6"))
            print(f"| {r['shape']} | {r['convs']} | {cells} | {r['model']} | {r['measured']} |")
        print(f"\nb{batch}: model plan {total_model * 1e3:.3f} ms, measured plan {total_tuned * 1e3:.3f} ms "
              f"(saved {(total_model - total_tuned) * 1e3:.3f} ms of device time per step)")
        result.append({"batch": batch, "rows": rows, "model_ms": total_model * 1e3, "tuned_ms": total_tuned * 1e3})
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
