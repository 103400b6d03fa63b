"""``op_report``: the per-op error of an optimized (fused / Winograd) model against the model it was made from.

1. Find every fused op's boundary tensors in the reference graph (:mod:`.boundary`).
2. Run the reference model once on the given inputs with those tensors tapped (XNNPACK, plus our delegate's CPU
   kernels only if the reference itself holds ``Sd*`` ops).
3. Run the probe (every fused op alone on the tapped inputs, :mod:`.probe`) on each backend of our delegate
   (``cpu``: its CPU kernels; ``opencl`` / ``gl``: the whole probe on the GPU) and compare each op's output with the
   tapped reference output; run the whole optimized model there too and compare its outputs (end to end).

The reference side is the unfused graph as LiteRT runs it in fp32, the same thing ``sdconvert --verify`` compares a
plain export with: fusion and Winograd are meant to compute the same function, so each row is the error the op's
kernel (on that backend) adds. Epilogue fusions the GPU delegate makes at run time (a residual ADD in a conv, a
GroupNorm in the next Winograd conv's input transform) need their neighbours, so they show only in the end-to-end
figure, not in an op's row.
"""
from __future__ import annotations

import gc
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sdconvert.errors import UserError
from sdconvert.graph.io import ModelFormatError, read_model, write_model

from .boundary import find_boundaries, short_location
from .probe import Plant, probe_model, tap_reference
from .report import OpReport, OpRow, describe, error

CLIP_BOS, CLIP_EOS, CLIP_VOCAB = 49406, 49407, 49408


def synthetic_inputs(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for a model of an SD export by signature name, with the ranges ``sdconvert --verify`` uses (token ids
    with BOS / EOS padding, timestep 981, normal latents and text states, an image in [-1, 1]); other float inputs
    standard normal, other integer inputs zero."""
    from sdconvert.manifest import signature_io

    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for spec in signature_io(path)["inputs"]:
        name, shape, dtype = spec["name"], tuple(spec["shape"]), np.dtype(spec["dtype"])
        if name == "input_ids" and len(shape) == 2:
            ids = rng.integers(0, CLIP_BOS, shape)
            ids[:, 0] = CLIP_BOS
            ids[:, min(12, shape[1]):] = CLIP_EOS
            out[name] = ids.astype(dtype)
        elif name == "timestep":
            out[name] = np.full(shape, 981.0, dtype)
        elif name == "image":
            out[name] = rng.uniform(-1.0, 1.0, shape).astype(dtype)
        elif np.issubdtype(dtype, np.floating):
            out[name] = rng.standard_normal(shape).astype(dtype)
        else:
            out[name] = np.zeros(shape, dtype)
    return out


def _delegates(backend: str, needed: bool) -> list[Any]:
    """Our delegate on ``backend`` (on ``cpu`` only when ``needed``: a model without Sd* ops runs on XNNPACK)."""
    if backend == "cpu" and not needed:
        return []
    from sdlite import native

    try:
        return [native.load(backend=backend)]
    except Exception as e:  # noqa: BLE001 - a missing library or GPU driver: one line, what to do
        raise UserError(f"--verify-backend {backend}: cannot load the sdgpu delegate ({e})") from None


def _run(path: Path, feeds: dict[str, np.ndarray], delegates: list[Any]) -> dict[str, np.ndarray]:
    from sdconvert.tflite_run import run_tflite

    try:  # all cores: at SD1.5 size the tapped reference and the whole-model runs are full UNet invocations
        return run_tflite(path, feeds, delegates=delegates, num_threads=os.cpu_count())
    except (RuntimeError, ValueError) as e:
        raise UserError(f"running {path.name} failed: {str(e).strip().splitlines()[-1][:300]}") from None


def op_report(model: str, reference: Path, optimized: Path, inputs: dict[str, np.ndarray],
              backends: Sequence[str] = ("cpu",), *, workdir: Path, fit_residuals: dict[str, float] | None = None,
              plant: Plant | None = None) -> OpReport:
    """The per-op table of ``optimized`` against ``reference`` (the same model before the graph stages) on
    ``inputs`` (signature name -> array), measured on each of ``backends``. ``workdir`` holds the two temporary
    models (the tapped reference is the size of the model). ``fit_residuals``: the fusion's rule residuals by
    output tensor name (``FuseReport.fit_residuals``). ``plant``: test entry point, see :mod:`.probe`."""
    try:
        ref, fused = read_model(reference), read_model(optimized)
    except ModelFormatError as e:
        raise UserError(str(e)) from None
    bounds = find_boundaries(fused, ref)
    measured = [(i, b) for i, b in enumerate(bounds) if not b.problem]
    report = OpReport(model, tuple(backends))
    for b in bounds:
        out = b.output if b.output is not None else b.op.outputs[0]
        report.rows.append(OpRow(b.index, b.op.type, describe(b.op), b.ref_output or out.name,
                                 short_location(b.label or out.name), tuple(b.op.outputs[0].shape or ()),
                                 fit_residual=(fit_residuals or {}).get(b.ref_output), problem=b.problem))
    wanted = [name for _, b in measured for name in (*(n for _, n in b.feeds), b.ref_output)]
    input_keys = {t.name: key for s in ref.signatures if s.subgraph is ref.main for key, t in s.inputs}
    model_outputs = [key for s in ref.signatures if s.subgraph is ref.main for key, _ in s.outputs]
    ref_has_fused = any(op.is_custom and op.type.startswith("Sd") for op in ref.main.ops)
    taps = tap_reference(ref, wanted)
    probe, rows = probe_model(measured, plant)
    by_row = dict(measured)
    tag = f"{model}-{os.getpid()}"
    tapped_path = write_model(ref, workdir / f".{tag}.reference-tapped.tflite")
    probe_path = write_model(probe, workdir / f".{tag}.probe.tflite") if rows else None
    del ref, fused, probe
    gc.collect()
    try:
        got_ref = _run(tapped_path, inputs, _delegates("cpu", ref_has_fused))
        tapped_path.unlink()

        def value(name: str) -> np.ndarray:
            return inputs[input_keys[name]] if name in input_keys else got_ref[taps[name]]

        feeds: dict[str, np.ndarray] = {}
        for r in rows:
            for key, (_, name) in zip(r.inputs, by_row[r.row].feeds):
                feeds[key] = value(name)
        for backend in backends:
            if probe_path is not None:
                got = _run(probe_path, feeds, _delegates(backend, True))
                for r in rows:
                    report.rows[r.row].errors[backend] = error(got[r.output], value(by_row[r.row].ref_output))
                del got
            whole = _run(optimized, inputs, _delegates(backend, True))
            report.end_to_end[backend] = {k: error(whole[k], got_ref[k]) for k in model_outputs}
            del whole
            gc.collect()
    finally:
        tapped_path.unlink(missing_ok=True)
        if probe_path is not None:
            probe_path.unlink(missing_ok=True)
    return report


__all__ = ["op_report", "synthetic_inputs"]
