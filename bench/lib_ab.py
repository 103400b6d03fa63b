"""Delegate builds side by side on the device by wall time: each (model, build) pair is one `sdlite bench` process
(opencl backend, no device profiling), interleaved over --rounds rounds in one call, so the builds see the same
machine state.

    python3 -m bench.lib_ab --model b1=/tmp/h200-work/models/unet_b1/fused+winoauto.tflite \\
        --lib new=.h200/lib/libsdgpu_delegate.so --lib old=.h200/lib_old/libsdgpu_delegate.so --rounds 2 \\
        --out $OUT/lib_ab.json

A build may carry delegate options: --lib tc=.h200/lib/libsdgpu_delegate.so@tensor_cores:3xtf32 (the text after @ goes
to `sdlite bench --delegate_options`), so one library can be compared with itself under other options.

Prints one markdown row per (model, build): the median wall ms of `invoke` of every round, the first run, and the
ratio to the first build's median of the same round; writes every `sdlite bench --json` result to --out. Needs the
kit's environment (after `source .h200/setup.sh`). (bench/ab_libs.sh compares builds by the event profile.)
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.precision_ab import bench


def _pairs(values: list[str], what: str) -> list[tuple[str, Path, str]]:
    """LABEL=path[@delegate options] -> (label, path, options)."""
    out = []
    for v in values:
        label, sep, rest = v.partition("=")
        path, _, options = rest.partition("@")
        if not sep or not label or not path:
            raise SystemExit(f"--{what} takes LABEL=path, got {v!r}")
        if not Path(path).is_file():
            raise SystemExit(f"--{what} {label}: no file {path}")
        out.append((label, Path(path), options))
    return out


def _median_ms(res: dict) -> float | None:
    return None if "error" in res else res["timings_us"]["median"] / 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="LABEL=path/to/model.tflite (repeatable)")
    ap.add_argument("--lib", action="append", required=True, help="LABEL=path/to/libsdgpu_delegate.so (repeatable)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--timeout-s", type=float, default=120.0, help="per bench process")
    ap.add_argument("--deadline-s", type=float, default=0.0, help="stop starting rows after this many seconds")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    models, libs = _pairs(args.model, "model"), _pairs(args.lib, "lib")
    start = time.monotonic()
    results: list[dict] = []
    print("| model | build | " + " | ".join(f"round {r + 1} ms" for r in range(args.rounds)) + " | first run ms |"
          " vs " + libs[0][0] + " |")
    print("|---|---|" + "---:|" * (args.rounds + 2))
    table: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.rounds):
        for mlabel, model, _ in models:
            for llabel, lib, options in libs:
                if args.deadline_s and time.monotonic() - start > args.deadline_s:
                    break
                res = bench(model, lib, args.runs, args.timeout_s, options)
                res.update({"round": r + 1, "model_label": mlabel, "lib_label": llabel})
                results.append(res)
                table.setdefault((mlabel, llabel), []).append(res)
                if args.out:
                    args.out.write_text(json.dumps(results, indent=1))
    for mlabel, _, _ in models:
        base = table.get((mlabel, libs[0][0]), [])
        for llabel, _, _ in libs:
            rows = table.get((mlabel, llabel), [])
            cells, ratios = [], []
            for k, res in enumerate(rows):
                ms = _median_ms(res)
                cells.append(f"{ms:.2f}" if ms else f"error: {res.get('error')}")
                bms = _median_ms(base[k]) if k < len(base) else None
                if ms and bms:
                    ratios.append(f"{ms / bms:.3f}")
            first = rows[0].get("first_run_us") if rows else None
            print(f"| {mlabel} | {llabel} | " + " | ".join(cells) + " | " + (f"{first / 1e3:.0f}" if first else "-") +
                  " | " + " / ".join(ratios) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
