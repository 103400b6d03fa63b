"""tensor_cores=3xtf32 (--mode fp64: tensor_cores=fp64, gemm_d64x64 / conv_d64x64) for the GEMMs (NVIDIA only): one-op models through the delegate, each checked against a float64
numpy reference, and the device profile must show a tensor-core kernel (gemm_x* / conv_x*, gemm_tc.cl) running the op. The
cases cover the kernels' contracts: partial row / column / k tiles, K % 4 != 0 (4-byte copies), bias and activation,
CONV_2D as implicit GEMM (conv_x*: padding, stride 2, 1x1, dilation),
BATCH_MATMUL with B's n axis (KN) and k axis (NK: adj_y) contiguous, a batch, the residual ADD epilogue, the folded
LayerNorm twin with rows of mean 1000 plus the gated GELU (gemm_x*_gg_ln), a Winograd conv's batched GEMM, and
SD1.5-sized FCs; each with the option off (fp32 kernels, for the error next to it), on (the cost model's pick), and with
every tensor-core config forced (gemm_tiles "BMxBNtc", one of them split-K). CI cannot run these kernels (PoCL has no
inline PTX), hence a device script.

Bounds: 1e-4 of the output's range for 3xTF32; for fp64 1e-6 or the fp32 kernels' own error on the case, whichever
is larger (the fp32 kernels give 1e-7 to 2e-6; a Winograd conv's error comes mostly from its fp32 transforms).

    python3 lab/tc_gemm_check.py [--mode fp64]   # after source .h200/setup.sh; SDLITE_DELEGATE_PATH=...
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "native"))
from harness import make_interpreter  # noqa: E402
from tflite_gemm_models import (OpGraphBuilder, batch_matmul_model, batch_matmul_ref, conv2d_model,  # noqa: E402
                                conv2d_ref, fully_connected_model, fully_connected_ref, winograd_model)
from test_opencl_layer_norm_fold import _model as ln_model, _want as ln_want  # noqa: E402
from test_opencl_residual import _fc  # noqa: E402

from ai_edge_litert import schema_py_generated as S  # noqa: E402
from sdconvert.ops.conv2d_winograd import SPEC as WSPEC, Conv2DWinogradAttrs  # noqa: E402
from sdconvert.winograd.reference import direct_conv2d  # noqa: E402
from sdlite import native  # noqa: E402

Case = tuple[str, str, bytes, dict, Callable[[], np.ndarray]]


def _cases(rng) -> list[Case]:
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    out: list[Case] = []
    for m, k, n, act in [(200, 100, 72, "relu"), (4096, 320, 1280, "none"), (1024, 2560, 640, "none"),
                         (77, 99, 130, "none"), (256, 1280, 10240, "none")]:
        x, w, b = r(1, m, k), r(n, k) * k**-0.5, r(n)
        out.append((f"FC {m}x{n}x{k} {act}", "FULLY_CONNECTED", fully_connected_model(x.shape, w, b, act), {"x": x},
                    lambda x=x, w=w, b=b, act=act: fully_connected_ref(x, w, b, act)))
    for bs, m, k, n, adj_y in [(2, 130, 40, 300, True), (8, 256, 64, 40, False), (3, 33, 17, 9, False)]:
        a, bb = r(bs, m, k), (r(bs, n, k) if adj_y else r(bs, k, n))
        out.append((f"BMM {bs}x{m}x{n}x{k} adj_y={adj_y}", "BATCH_MATMUL",
                    batch_matmul_model(a.shape, bb.shape, [bs, m, n], False, adj_y), {"a": a, "b": bb},
                    lambda a=a, bb=bb, adj_y=adj_y: batch_matmul_ref(a, bb, False, adj_y)))
    # FC + residual ADD (the epilogue folds the ADD)
    m, k, n = 300, 192, 200
    x, w, b, res = r(1, m, k), r(n, k) * 0.1, r(n), r(1, m, n)
    g = OpGraphBuilder()
    xi, ri = g.input("x", [1, m, k]), g.input("r", [1, m, n])
    y = _fc(g, xi, w, b, [1, m, n], "fc")
    o = g.tensor("o", [1, m, n])
    g.builtin(S.BuiltinOperator.ADD, S.BuiltinOptions.AddOptions, S.AddOptionsT(), [y, ri], [o])
    g.output(o)
    out.append(("FC + residual 300x200x192", "FULLY_CONNECTED", g.build(), {"x": x, "r": res},
                lambda x=x, w=w, b=b, res=res: fully_connected_ref(x, w, b) + res))
    # folded LayerNorm (rows of mean 1000) + gated GELU: the _gg_ln twin
    for m, k, n, gated in [(200, 96, 72, False), (130, 64, 96, True), (4096, 320, 2560, True)]:
        model, gamma, beta, w, b = ln_model(rng, m, k, n, True, gated)
        xv = (r(m, 1, k) * 2.0 + 1000.0).astype(np.float32)
        out.append((f"LN fold {m}x{n}x{k} gated={gated} mean 1000", "FULLY_CONNECTED", model, {"x": xv},
                    lambda xv=xv, gamma=gamma, beta=beta, w=w, b=b, gated=gated: ln_want(xv, gamma, beta, w, b,
                                                                                        gated)))
    # CONV_2D, implicit GEMM (conv_x*): 3x3 SAME, 3x3 stride 2 (SD's downsamplers), 1x1 (shortcuts), dilation 2
    for (n, h, ci, co), k, stride, dil, act in [((1, 33, 64, 80), 3, 1, 1, "relu"), ((2, 32, 320, 320), 3, 2, 1, "none"),
                                                ((1, 16, 640, 320), 1, 1, 1, "none"), ((1, 20, 32, 24), 3, 1, 2, "none")]:
        x, w, b = r(n, h, h, ci), r(co, k, k, ci) * (k * k * ci) ** -0.5, r(co)
        out.append((f"CONV {k}x{k}/{stride} d{dil} {n}x{h}x{h} {ci}->{co}", "CONV_2D",
                    conv2d_model(x.shape, w, b, stride, dil, "SAME", act), {"x": x},
                    lambda x=x, w=w, b=b, stride=stride, dil=dil, act=act: conv2d_ref(x, w, b, stride, dil, "SAME", act)))
    # Winograd: the batched GEMM of the transformed tiles
    for tile, (h, ci, co) in [(4, (32, 320, 320)), (2, (10, 64, 40))]:
        x, w, b = r(1, h, h, ci), r(co, 3, 3, ci) * (9 * ci) ** -0.5, r(co)
        opts = WSPEC.encode(Conv2DWinogradAttrs(tile=tile, padding="SAME", activation="none"))
        out.append((f"Winograd F{tile} {h}x{h} {ci}->{co}", "SdConv2DWinograd", winograd_model(x.shape, w, b, opts),
                    {"x": x}, lambda x=x, w=w, b=b: direct_conv2d(x, w, b, padding="SAME")))
    return out


# (label, delegate options): the fp32 kernels, the cost model's pick with the option, then each tensor-core config
# forced (gemm_tiles "BMxBNtc", split-K once, with the option: the default, auto, would name the FP64 config on sm_90);
# the forced rows must run a gemm_x kernel
TF = {"tensor_cores": "3xtf32"}
RUNS = [("fp32", {"tensor_cores": "off"}), ("auto", TF),
        ("x128x128", {"gemm_tiles": "128x128tc", **TF}), ("x128x64", {"gemm_tiles": "128x64tc", **TF}),
        ("x64x64", {"gemm_tiles": "64x64tc", **TF}), ("x64x64/2", {"gemm_tiles": "64x64tc/2", **TF})]
# --mode fp64: the FP64 config (one size), forced with the option on
RUNS_FP64 = [("fp32", {"tensor_cores": "off"}), ("auto", {"tensor_cores": "fp64"}),
             ("x64x64", {"gemm_tiles": "64x64tc", "tensor_cores": "fp64"}),
             ("x64x64/2", {"gemm_tiles": "64x64tc/2", "tensor_cores": "fp64"})]


def _run(model: bytes, inputs: dict, op: str, options: dict) -> tuple[np.ndarray, list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        prof = Path(tmp) / "p.json"
        delegate = native.load("opencl", profile_path=str(prof), gemm_autotune=False, **options)
        runner = make_interpreter(model, delegate).get_signature_runner("serving_default")
        got = next(iter(runner(**inputs).values()))
        kernels = [kk["name"] for node in json.loads(prof.read_text())["nodes"] if node["op"] == op
                   for kk in node["kernels"]]
    return got, kernels


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("3xtf32", "fp64"), default="3xtf32")
    fp64 = ap.parse_args().mode == "fp64"
    runs, prefixes, bound = (RUNS_FP64, ("gemm_d", "conv_d"), 1e-6) if fp64 else (RUNS, ("gemm_x", "conv_x"), 1e-4)
    rng = np.random.default_rng(0)
    ok = True
    worst = 0.0
    for name, op, model, inputs, want in _cases(rng):
        ref = np.asarray(want(), np.float64).reshape(-1)
        cells = []
        fp32_err = 0.0
        for label, options in runs:
            got, kernels = _run(model, inputs, op, options)
            err = float(np.abs(got.reshape(-1) - ref).max() / np.abs(ref).max())
            tc = [k for k in kernels if k.startswith(prefixes)]
            if label == "fp32":
                fp32_err = err
            limit = (max(bound, fp32_err) if fp64 else bound) if tc else 1e-4
            good = np.isfinite(got).all() and err <= limit and (bool(tc) if label.startswith("x") else
                                                              not tc if label == "fp32" else True)
            if tc:
                worst = max(worst, err)
            ok &= bool(good)
            cells.append(f"{label} {err:.1e} {'/'.join(tc) if tc else kernels[0] if kernels else '-'}"
                         f"{'' if good else ' FAIL'}")
        print(f"{name:42s} " + " | ".join(cells), flush=True)
    print(f"worst tensor-core error {worst:.1e}: {'all ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
