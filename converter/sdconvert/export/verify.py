"""Parity of an exported model against its torch module on the same random inputs (max-abs, relative, PSNR).

Relative error is max|tflite - torch| / max|torch| (scale-free, so one tolerance serves text states, noise and images);
PSNR uses max|torch| as the peak. Tolerances per precision are set from measurements on random-weight SD models:
fp32 matches to ~1e-6; weight-only fp16 / int8 add the weights' rounding error, which compounds through depth.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

# part of verify's API (convert.py and the tests call verify.run_tflite); defined one layer down for opcheck too
from sdconvert.tflite_run import run_tflite  # noqa: F401

TOLERANCE = {"fp32": 1e-4, "fp16": 2e-2, "int8": 1e-1}


@dataclass(frozen=True)
class Parity:
    model: str
    max_abs: float
    rel: float
    psnr_db: float
    tolerance: float
    backend: str = "cpu"  # where the .tflite ran: cpu (XNNPACK + our delegate's CPU kernels for Sd* ops), opencl, gl

    @property
    def ok(self) -> bool:
        return math.isfinite(self.rel) and self.rel <= self.tolerance

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def compare(model: str, got: np.ndarray, ref: np.ndarray, tolerance: float, backend: str = "cpu") -> Parity:
    got64, ref64 = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got64.shape != ref64.shape:
        raise ValueError(f"{model}: output shape {got64.shape} != reference {ref64.shape}")
    err = np.abs(got64 - ref64)
    max_abs = float(err.max()) if np.isfinite(err).all() else float("inf")
    peak = float(np.abs(ref64).max()) or 1.0
    rmse = float(np.sqrt(np.mean(err**2))) if math.isfinite(max_abs) else float("inf")
    psnr = 20 * math.log10(peak / rmse) if rmse > 0 else float("inf")
    return Parity(model, max_abs, max_abs / peak, psnr, tolerance, backend)


def format_table(rows: Sequence[Parity]) -> str:
    lines = [f"{'model':<14}{'backend':<9}{'max_abs':>12}{'rel':>12}{'PSNR dB':>10}{'tol':>10}  ok"]
    for p in rows:
        lines.append(f"{p.model:<14}{p.backend:<9}{p.max_abs:>12.3e}{p.rel:>12.3e}{p.psnr_db:>10.1f}"
                     f"{p.tolerance:>10.0e}  {'yes' if p.ok else 'NO'}")
    return "\n".join(lines)
