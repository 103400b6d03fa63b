"""The per-op error table: one row per fused op (and per Winograd conv, with its tile), one column pair per backend.

Errors are those of :mod:`sdconvert.export.verify`: ``max_abs`` = max |fused - reference|, ``rel`` = max_abs /
max |reference| (scale-free, so rows of different ops compare), over the op's output tensor.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sdconvert.graph.ir import Op

LOCATION_WIDTH = 52


@dataclass(frozen=True)
class Err:
    max_abs: float
    rel: float

    def as_dict(self) -> dict[str, float]:
        return {"max_abs": self.max_abs, "rel": self.rel}


def error(got: np.ndarray, ref: np.ndarray) -> Err:
    """max |got - ref| and that over max |ref| (inf when either side has a NaN/inf the other has not)."""
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if g.shape != r.shape:
        g = g.reshape(r.shape)
    d = np.abs(g - r)
    max_abs = float(d.max()) if d.size and np.isfinite(d).all() else (0.0 if not d.size else math.inf)
    peak = float(np.abs(r).max()) if r.size else 0.0
    return Err(max_abs, max_abs / peak if peak > 0 else (0.0 if max_abs == 0 else math.inf))


def describe(op: Op) -> str:
    """The op's variant in a few words: Winograd tile, GroupNorm groups / activation, attention kernel, GELU form."""
    from sdconvert import ops as sdops

    try:
        a = sdops.get(op.type).decode(op.custom_options or b"")
    except (KeyError, ValueError):
        return ""
    if op.type == "SdConv2DWinograd":
        return f"F{a.tile}" + ("" if a.activation == "none" else f" {a.activation}")
    if op.type == "SdGroupNorm":
        kind = "layer norm" if a.groups == 1 and a.channel_axis == -1 else f"groups={a.groups}"
        return kind + ("" if a.activation == "none" else f" +{a.activation}")
    if op.type == "SdAttention":
        return f"{a.variant} {a.heads}x{a.head_dim}" + (" causal" if a.causal else "")
    if op.type == "SdGelu":
        return ("gated " if a.gated else "") + {"none": "erf", "tanh": "tanh", "quick": "quick"}[a.approximate]
    return ""


@dataclass
class OpRow:
    """One fused op: where it is, what it is, and its error on each backend."""

    index: int  # position in the optimized model's main subgraph (the node index `sdlite bench` shows)
    op: str
    detail: str
    tensor: str  # the reference tensor its output is compared with
    location: str
    shape: tuple[int, ...]
    errors: dict[str, Err] = field(default_factory=dict)
    fit_residual: float | None = None
    problem: str = ""

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index, "op": self.op, "detail": self.detail, "location": self.location,
                             "tensor": self.tensor, "shape": list(self.shape),
                             "errors": {b: e.as_dict() for b, e in self.errors.items()}}
        if self.fit_residual is not None:
            d["fit_residual"] = self.fit_residual
        if self.problem:
            d["problem"] = self.problem
        return d


@dataclass
class OpReport:
    """The table for one model. ``end_to_end``: backend -> signature output -> error of the whole optimized model
    against the reference model on the same inputs (where the per-op errors add up)."""

    model: str
    backends: tuple[str, ...]
    rows: list[OpRow] = field(default_factory=list)
    end_to_end: dict[str, dict[str, Err]] = field(default_factory=dict)

    def worst(self, backend: str) -> OpRow | None:
        """The row with the largest relative error on ``backend`` (None without measured rows)."""
        rows = [r for r in self.rows if backend in r.errors]
        return max(rows, key=lambda r: (r.errors[backend].rel, -r.index)) if rows else None

    def as_dict(self) -> dict[str, Any]:
        worst = {b: w.index for b in self.backends if (w := self.worst(b)) is not None}
        return {"backends": list(self.backends), "rows": [r.as_dict() for r in self.rows],
                "end_to_end": {b: {k: e.as_dict() for k, e in outs.items()} for b, outs in self.end_to_end.items()},
                "worst": worst}

    def format_table(self) -> str:
        """A markdown table (as the Winograd plan's), then the end-to-end errors and the worst op per backend."""
        has_fit = any(r.fit_residual is not None for r in self.rows)
        head = ["#", "op", "detail", "location", "shape"]
        for b in self.backends:
            head += [f"{b} max abs", f"{b} rel"]
        if has_fit:
            head.append("fit")
        lines = [f"{self.model} per-op error (each fused op on the unfused graph's tensors at its boundary):",
                 "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.rows:
            loc = r.location if len(r.location) <= LOCATION_WIDTH else "..." + r.location[-(LOCATION_WIDTH - 3):]
            cells = [str(r.index), r.op, r.detail, loc, "x".join(map(str, r.shape))]
            for b in self.backends:
                e = r.errors.get(b)
                cells += [f"{e.max_abs:.2e}", f"{e.rel:.2e}"] if e is not None else ["-", "-"]
            if has_fit:
                cells.append(f"{r.fit_residual:.1e}" if r.fit_residual is not None else "")
            if r.problem:
                cells[3] = f"{loc} (not compared: {r.problem})"
            lines.append("| " + " | ".join(cells) + " |")
        lines.extend(self.summary_lines())
        return "\n".join(lines)

    def summary_lines(self, top: int = 1) -> list[str]:
        """Per backend: the whole model's error and the ``top`` worst ops."""
        lines = []
        for b in self.backends:
            outs = self.end_to_end.get(b, {})
            whole = ", ".join(f"{k} rel {e.rel:.2e} (max abs {e.max_abs:.2e})" for k, e in outs.items())
            ranked = sorted((r for r in self.rows if b in r.errors), key=lambda r: (-r.errors[b].rel, r.index))[:top]
            worst = "; ".join(f"#{r.index} {r.op} {r.detail} {r.location} rel {r.errors[b].rel:.2e}" for r in ranked)
            lines.append(f"{self.model} on {b}: whole model {whole or '-'}" + (f"; worst op {worst}" if worst else ""))
        return lines


__all__ = ["Err", "OpReport", "OpRow", "describe", "error"]
