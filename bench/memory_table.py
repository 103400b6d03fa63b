"""``python3 bench/memory_table.py OUT PREFIX N``: one line per run of the memory scripts (memory_runs.sh,
phone_runs.sh): from ``OUT/PREFIX{i}.json`` (``sdlite generate --json``) and ``OUT/img{i}.png``, the peak GPU memory
(delegate accounting), per-model GPU bytes, peak host RSS, start to PNG, UNet step and the PSNR against run 1's
image."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from PIL import Image


def main(out: Path, prefix: str, runs: int) -> None:
    ref = np.asarray(Image.open(out / "img1.png")).astype(np.float64)
    for i in range(1, runs + 1):
        try:
            d = json.loads((out / f"{prefix}{i}.json").read_text())
            img = np.asarray(Image.open(out / f"img{i}.png")).astype(np.float64)
        except (OSError, ValueError) as exc:
            print(i, "no result:", exc)
            continue
        m, t = d["memory"], d["startup"]["timeline"]
        mse = float(((img - ref) ** 2).mean())
        psnr = 99.0 if mse == 0 else 10 * np.log10(255.0**2 / mse)
        print(i, "peak_gpu_MB", round(m["peak_gpu_bytes"] / 2**20, 1),
              "per model MB", {k: round(v / 2**20, 1) for k, v in m["gpu_bytes"].items()},
              "peak_rss_MB", round(m["peak_host_rss_bytes"] / 2**20, 1), "png_s", t.get("png_0"),
              "unet_step_ms", round(1e3 * (d["timings"]["unet_step_steady_mean_s"] or 0), 2), "PSNR_vs_1", round(psnr, 2))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the runs' folder ($OUT)")
    ap.add_argument("prefix", help="the JSON files' prefix (mem, r)")
    ap.add_argument("runs", type=int, help="how many runs")
    args = ap.parse_args()
    main(args.out, args.prefix, args.runs)
