"""Issue #7 probe: the GL backend's SOFTMAX (and the other exp-based kernels) on large rows, against numpy
float64 and the OpenCL backend, under kernel variants and compiler knobs, in one command.

Every case is a one-node .tflite model (tests/native builders) run once to compile and once to measure (repeat_max_diff: the two outputs
differ = a race); each (backend, knobs) row gets a fresh delegate with its debugging options set (gl_device.h lists
them: gl_kernel_alias swaps a library kernel in under an op's kernel name, gl_nv_pragmas=0 drops
``#pragma optionNV``, gl_plain_buffers=1 drops readonly/writeonly)::

    python3 scripts/gl_softmax_probe.py --lib build/gf/libsdgpu_delegate.so --shapes 1x1x512x4096 \
        --configs opencl,gl,gl_nopragma --sections softmax,group_norm,attention,gelu

Issue #7 (softmax_f32 re-read a reused shared slot on NVIDIA; shaders/common.glsl) was found with kernel
variants swapped in through gl_kernel_alias and the NV assembly from gl_dump_dir (--dump-dir; with --out the dump
folder is packed as dump.tgz).

Columns: rel = |y - ref| / |ref| (2-norm), max_abs, rowsum = max |sum(row) - 1|, bad_rows = rows with a
relative error above 1e-4, warps = bad elements whose column % 64 lies in invocations 0-31 / 32-63 (the
kernels give column c to invocation c % 64), ms = the second invoke's wall time.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "native"), str(ROOT / "converter"), str(ROOT / "python")]

# (backend, delegate options) per config name.
CONFIGS: dict[str, tuple[str, dict[str, str]]] = {
    "opencl": ("opencl", {}),
    "gl": ("gl", {}),
    "gl_nopragma": ("gl", {"gl_nv_pragmas": "0"}),
    "gl_plain": ("gl", {"gl_plain_buffers": "1"}),
    "gl_finish": ("gl", {"gl_finish_each": "1"}),
}
GL_EXTRA: dict[str, str] = {}  # options every GL config gets (--dump-dir, --alias)


def run_model(lib: str, config: str, model: bytes,
              feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, float, dict[str, Any]]:
    """(output, ms of the second invoke, delegate stats) of `model` on a fresh delegate of `config`."""
    from ai_edge_litert.interpreter import Interpreter, load_delegate

    backend, knobs = CONFIGS[config]
    d = load_delegate(lib, {"backend": backend, **knobs, **(GL_EXTRA if backend == "gl" else {})})
    runner = Interpreter(model_content=model, experimental_delegates=[d]).get_signature_runner("serving_default")
    first = next(iter(runner(**feeds).values())).copy()
    t0 = time.perf_counter()
    out = next(iter(runner(**feeds).values()))
    ms = (time.perf_counter() - t0) * 1e3
    return out, ms, {"repeat_max_diff": float(np.abs(out.astype(np.float64) - first).max())}


def softmax64(x: np.ndarray) -> np.ndarray:
    y = x.astype(np.float64)
    y -= y.max(axis=-1, keepdims=True)
    np.exp(y, out=y)
    y /= y.sum(axis=-1, keepdims=True)
    return y


def row_metrics(got: np.ndarray, ref: np.ndarray, rows_are_softmax: bool) -> dict[str, Any]:
    cols = ref.shape[-1]
    g = got.reshape(-1, cols).astype(np.float64)
    r = ref.reshape(-1, cols)
    err = np.abs(g - r)
    m: dict[str, Any] = {"rel": float(np.linalg.norm(err) / max(np.linalg.norm(r), 1e-300)),
                         "max_abs": float(err.max())}
    row_rel = np.linalg.norm(err, axis=1) / np.maximum(np.linalg.norm(r, axis=1), 1e-300)
    bad_rows = np.flatnonzero(row_rel > 1e-4)
    m["bad_rows"] = int(bad_rows.size)
    if rows_are_softmax:
        m["rowsum"] = float(np.abs(g.sum(axis=1) - 1.0).max())
    bad = err > 1e-4 * np.abs(r) + 1e-6 * np.abs(r).max(axis=1, keepdims=True)
    lid = np.flatnonzero(bad.any(axis=0)) % 64
    cols_bad = bad.sum(axis=0)
    m["bad_elems"] = int(bad.sum())
    m["warps"] = [int(cols_bad[np.arange(cols) % 64 < 32].sum()), int(cols_bad[np.arange(cols) % 64 >= 32].sum())]
    m["bad_lids"] = sorted(set(int(v) for v in lid))[:16]
    if bad_rows.size:
        m["first_bad_rows"] = [int(v) for v in bad_rows[:8]]
        i = int(bad_rows[0])
        ratio = g[i] / np.maximum(r[i], 1e-300)
        m["row0_ratio_min_max"] = [float(ratio.min()), float(ratio.max())]
        m["row0_bad_cols"] = [int(v) for v in np.flatnonzero(bad[i])[:16]]
        # bad rows spread: fraction within the first / last 1/8 of the rows
        n = g.shape[0]
        m["bad_row_octants"] = np.bincount(bad_rows * 8 // n, minlength=8).tolist()
    return m


def softmax_section(args, rng: np.random.Generator, report: Callable[[dict], None]) -> None:
    from ai_edge_litert import schema_py_generated as S  # noqa: F401  (tflite_builtin needs it)
    from tflite_builtin import BuiltinGraph

    for shape_s in args.shapes.split(","):
        shape = [int(v) for v in shape_s.split("x")]
        g = BuiltinGraph()
        x = g.input("x", shape)
        g.output(g.softmax(x, shape, 1.0, "y"))
        model = g.build()
        for scale in [float(s) for s in args.scales.split(",")]:
            xv = (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale))
            ref = softmax64(xv)
            for config in args.configs.split(","):
                row: dict[str, Any] = {"section": "softmax", "shape": shape_s, "scale": scale, "config": config}
                try:
                    y, ms, extra = run_model(args.lib, config, model, {"x": xv})
                    row.update(row_metrics(y, ref, True), ms=round(ms, 2), **extra)
                except Exception as e:  # noqa: BLE001 - one failing config must not end the probe
                    row["error"] = str(e)[:300]
                report(row)
            del ref


def attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, d: int, scale: float) -> np.ndarray:
    n, s, _ = q.shape
    out = np.empty((n, s, heads * d), np.float64)
    for b in range(n):
        for h in range(heads):
            sl = slice(h * d, (h + 1) * d)
            sc = (q[b, :, sl].astype(np.float64) @ k[b, :, sl].astype(np.float64).T) * scale
            out[b, :, sl] = softmax64(sc) @ v[b, :, sl].astype(np.float64)
    return out


def attention_section(args, rng: np.random.Generator, report: Callable[[dict], None]) -> None:
    from sdconvert.ops import attention as A
    from tflite_models import attention_model

    tokens = args.tokens
    for heads, d in ((8, 40), (1, 256)):
        for qscale in (1.0, 5.5, 17.0):  # score std ~ qscale^2: 1, 30, 300
            q, k, v = (rng.standard_normal((1, tokens, heads * d), dtype=np.float32) * np.float32(s)
                       for s in (qscale, qscale, 1.0))
            ref = attention_ref(q, k, v, heads, d, d ** -0.5)
            for variant in ("partial_softmax", "flash"):
                attrs = A.AttentionAttrs(heads=heads, head_dim=d, scale=d ** -0.5, causal=False, variant=variant)
                model = attention_model(1, tokens, tokens, heads, d, A.SPEC.encode(attrs))
                for config in [c for c in args.configs.split(",") if c in ("opencl", "gl", "gl_nopragma")]:
                    row = {"section": "attention", "heads": heads, "head_dim": d, "score_std": qscale ** 2,
                           "variant": variant, "config": config}
                    try:
                        y, ms, _ = run_model(args.lib, config, model, {"q": q, "k": k, "v": v})
                        row.update(row_metrics(y.reshape(-1, heads * d), ref.reshape(-1, heads * d), False),
                                   ms=round(ms, 2))
                    except Exception as e:  # noqa: BLE001
                        row["error"] = str(e)[:300]
                    report(row)


def group_norm_section(args, rng: np.random.Generator, report: Callable[[dict], None]) -> None:
    """SdGroupNorm(+SiLU) at SD sizes: NHWC [1, 64, 64, C], 32 groups (two reductions per group)."""
    from sdconvert.ops import group_norm as GN
    from tflite_models import group_norm_model

    for c in (128, 512):
        shape = (1, 64, 64, c)
        attrs = GN.GroupNormAttrs(groups=32, eps=1e-6, activation="silu", channel_axis=-1)
        x = (rng.standard_normal(shape) * 4.0 + 2.0).astype(np.float32)
        gamma, beta = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
        ref = GN.reference([x, gamma, beta], attrs).astype(np.float64)
        model = group_norm_model(shape, gamma, beta, GN.SPEC.encode(attrs))
        for config in [c for c in args.configs.split(",") if c in ("opencl", "gl", "gl_nopragma")]:
            row = {"section": "group_norm", "shape": "x".join(map(str, shape)), "config": config}
            try:
                y, ms, extra = run_model(args.lib, config, model, {"x": x})
                row.update(row_metrics(y.reshape(-1, c), ref.reshape(-1, c), False), ms=round(ms, 2), **extra)
            except Exception as e:  # noqa: BLE001
                row["error"] = str(e)[:300]
            report(row)


def gelu_section(args, rng: np.random.Generator, report: Callable[[dict], None]) -> None:
    from sdconvert.ops import gelu as G
    from tflite_models import gelu_model

    x = np.concatenate([np.linspace(-120, 120, 24001), rng.standard_normal(20000) * 30,
                        rng.standard_normal(20000)]).astype(np.float32)[None]
    x64 = x.astype(np.float64)
    refs = {"none": 0.5 * x64 * np.vectorize(math.erfc, otypes=[np.float64])(-x64 / math.sqrt(2.0)),
            "tanh": 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64**3))),
            "quick": x64 / (1.0 + np.exp(-1.702 * x64))}
    for mode, ref in refs.items():
        model = gelu_model(x.shape, G.SPEC.encode(G.GeluAttrs(approximate=mode)))
        for config in [c for c in args.configs.split(",") if c in ("opencl", "gl", "gl_nopragma")]:
            row = {"section": "gelu", "mode": mode, "config": config}
            try:
                y, _, _ = run_model(args.lib, config, model, {"x": x})
                err = np.abs(y.astype(np.float64) - ref)
                tol = 1e-5 * np.abs(ref) + 1e-30
                worst = int(np.argmax(err / tol))
                row.update(rel=float(np.linalg.norm(err) / np.linalg.norm(ref)), max_abs=float(err.max()),
                           bad=int((err > tol).sum()), worst_x=float(x64[0, worst]), worst_got=float(y[0, worst]),
                           worst_want=float(ref[0, worst]), nonfinite=int((~np.isfinite(y)).sum()))
            except Exception as e:  # noqa: BLE001
                row["error"] = str(e)[:300]
            report(row)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--configs", default="opencl,gl,gl_nopragma,gl_plain")
    ap.add_argument("--sections", default="softmax,group_norm,attention,gelu")
    ap.add_argument("--shapes", default="1x1x4096x4096,1x1x512x4096,1x1x4096x512,8x4096x4096")
    ap.add_argument("--scales", default="1,30,300")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--out", default="", help="folder: probe.jsonl (+ dump.tgz with --dump-dir)")
    ap.add_argument("--dump-dir", default="", help="GL configs: write each compiled program here (gl_dump_dir)")
    ap.add_argument("--alias", default="", help="GL configs: gl_kernel_alias, e.g. softmax_f32=my_variant")
    args = ap.parse_args(argv)
    if args.dump_dir:
        Path(args.dump_dir).mkdir(parents=True, exist_ok=True)
        GL_EXTRA["gl_dump_dir"] = args.dump_dir
    if args.alias:
        GL_EXTRA["gl_kernel_alias"] = args.alias
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []

    def report(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out:
            (out / "probe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    sections = {"softmax": softmax_section, "group_norm": group_norm_section, "attention": attention_section,
                "gelu": gelu_section}
    for name in args.sections.split(","):
        t0 = time.perf_counter()
        sections[name](args, np.random.default_rng(0), report)
        print(f"# section {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    dump = args.dump_dir
    if out and dump and Path(dump).is_dir():
        with tarfile.open(out / "dump.tgz", "w:gz") as tar:
            tar.add(dump, arcname="dump")
    return 0


if __name__ == "__main__":
    sys.exit(main())
