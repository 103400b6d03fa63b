"""SdConv2DWinograd's filter transform U = G g G^T made on the device at set-up (winograd_filter_fM, kernel dialect
code at the end of ops/conv2d_winograd/gpu.kern, one source for both GPU backends): the filter goes up as stored and
the host transforms nothing (stats weights_on_device / weights_on_host), and the conv computes what the CPU kernels
compute with their float64 U. OpenCL computes U in double where the device has it (PoCL does), GL in float. The
tile-major layout (gemm_t16x64 reads B tile-major: padding columns up to a multiple of 64 written zero) is covered by
forcing that tile config with gemm_tiles. PoCL / llvmpipe in CI."""
from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from sdlite import native
from test_winograd_delegate import _opts, conv_model


def _run(model: bytes, x: np.ndarray, backend: str, **options) -> tuple[np.ndarray, dict]:
    delegate = native.load(backend=backend, **options)
    it = Interpreter(model_content=model, experimental_delegates=[delegate])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]).copy(), native.stats(delegate)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b))


@pytest.mark.parametrize("backend", ["opencl", "gl"])
@pytest.mark.parametrize(("tile", "gemm_tiles"), [(2, None), (4, None), (6, None), (4, "16x64")])
def test_u_is_made_on_the_device_and_matches_the_cpu_kernels(rng, backend: str, tile: int,
                                                             gemm_tiles: str | None) -> None:
    co, ci = 40, 24  # Co not a multiple of 64: the tile-major layout has padding columns
    w = (rng.standard_normal((co, 3, 3, ci)) * 0.2).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    x = rng.standard_normal((1, 26, 25, ci)).astype(np.float32)  # >= 16 tiles for F6 (else a direct conv)
    model = conv_model(x.shape, w, b, _opts(tile))
    want, _ = _run(model, x, "cpu")
    extra = {"gemm_tiles": gemm_tiles} if gemm_tiles else {}
    got, stats = _run(model, x, backend, cache_dir="none", **extra)
    assert stats["partitions"] == 1 and stats["declined_nodes"] == 0
    assert stats["weights_on_device"] >= 1 and stats["weights_on_host"] == 0
    assert stats["setup_weights_host_us"] == 0  # the host transformed nothing
    # OpenCL's U is the host's bit for bit (double on PoCL); GL's is float, a few ulps off, which F6 amplifies
    assert _rel(got, want) < (2e-6 if backend == "opencl" else 1e-5)
