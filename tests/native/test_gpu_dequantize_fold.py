"""Weight-only fp16 / int8 exports (``sdconvert --precision fp16|int8``: constant weights behind DEQUANTIZE nodes) on
the GPU backends. A DEQUANTIZE of a constant whose output stays inside the partition launches nothing: the partition
dequantizes it once on the host and its readers take it as a float32 constant, so an FC packs it, a Winograd conv
transforms it into U and runs in the Winograd domain, and the GPU holds it once (before: a per-invoke copy into the
arena, Winograd's direct-conv fallback, and weights counted twice because the validation build uploaded them too).
Exact byte counts as in test_opencl_weight_bytes.py; PoCL / llvmpipe in CI."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S
from ai_edge_litert.interpreter import Interpreter

from sdconvert.export.precision import convert_weights
from sdlite import native
from test_opencl_residual import _fc, _reshape
from test_winograd_delegate import _opts, conv_model
from tflite_gemm_models import OpGraphBuilder, fully_connected_model


def _quantized(tmp_path: Path, model: bytes, precision: str) -> bytes:
    src, dst = tmp_path / "f32.tflite", tmp_path / f"{precision}.tflite"
    src.write_bytes(model)
    report = convert_weights(src, dst, precision)
    assert report.tensors >= 1  # the weights really are behind a DEQUANTIZE now
    return dst.read_bytes()


def _run(model: bytes, inputs: dict[str, np.ndarray], backend: str | None, invokes: int = 1,
         **options) -> tuple[dict[str, np.ndarray], dict]:
    delegate = native.load(backend=backend, **options) if backend else None
    it = Interpreter(model_content=model, experimental_delegates=[delegate] if delegate else [])
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], inputs[d["name"]])
    stats = []
    for _ in range(invokes):
        it.invoke()
        if delegate:
            stats.append(native.stats(delegate))
    out = {d["name"]: it.get_tensor(d["index"]).copy() for d in it.get_output_details()}
    return out, stats


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b))


@pytest.mark.parametrize("backend", ["opencl", "gl"])
@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_fc_weights_behind_dequantize_are_packed_once(tmp_path: Path, rng, precision: str, backend: str) -> None:
    w = rng.standard_normal((256, 512)).astype(np.float32) * 0.05
    b = rng.standard_normal(256).astype(np.float32)  # 256 elements: stays float32 (precision.MIN_ELEMENTS)
    model = _quantized(tmp_path, fully_connected_model([1, 8, 512], w, b), precision)
    x = {"x": rng.standard_normal((1, 8, 512)).astype(np.float32)}
    want, _ = _run(model, x, None)  # the CPU interpreter: builtin DEQUANTIZE + FULLY_CONNECTED
    got, stats = _run(model, x, backend)
    assert _rel(got["y"], want["y"]) < 1e-5
    s = stats[0]
    assert s["partitions"] == 1 and s["declined_nodes"] == 0
    assert s["device_weight_bytes"] == 256 * 512 * 4 + 256 * 4  # the float32 weights once, the bias
    assert s["max_arena_bytes"] < 256 * 512 * 4  # no per-invoke copy of the weights in the arena


@pytest.mark.parametrize("tile", [2, 4, 6])
def test_winograd_filter_behind_dequantize_runs_in_the_winograd_domain(tmp_path: Path, rng, tile: int) -> None:
    """U is (tile + 2)^2 / 9 x the filter: the byte count proves the conv did not fall back to the direct kernel."""
    w = (rng.standard_normal((64, 3, 3, 32)) * 0.1).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    model = _quantized(tmp_path, conv_model((1, 48, 48, 32), w, b, _opts(tile)), "fp16")
    x = {"x": rng.standard_normal((1, 48, 48, 32)).astype(np.float32)}
    want, _ = _run(model, x, "cpu")  # the reference kernels (Winograd in float64 U, like the GPU's)
    got, stats = _run(model, x, "opencl")
    assert _rel(got["y"], want["y"]) < 1e-4
    assert stats[0]["device_weight_bytes"] == (tile + 2) ** 2 * 32 * 64 * 4 + 64 * 4


def _dequantize_output_model(w16: np.ndarray) -> bytes:
    """y = DEQUANTIZE(constant fp16): the DEQUANTIZE's output is the partition's output, so it is not folded."""
    g = OpGraphBuilder()
    x = g.input("x", [1])  # unused; a model needs an input
    q = g.const("w16", w16)
    y = g.tensor("y", list(w16.shape))
    g.builtin(S.BuiltinOperator.DEQUANTIZE, S.BuiltinOptions.NONE, None, [q], [y])
    g.output(y)
    del x
    return g.build()


@pytest.mark.parametrize("storage", ["float32", "half"])
@pytest.mark.parametrize("backend", ["opencl", "gl"])
def test_dequantize_that_leaves_the_partition_still_runs_and_uploads_once(rng, backend: str, storage: str) -> None:
    """storage "half" (activations_fp16): the constant is kept like the activations, as half, and copied unchanged."""
    half = storage == "half"
    w16 = rng.standard_normal((64, 96)).astype(np.float16)
    got, stats = _run(_dequantize_output_model(w16), {"x": np.zeros(1, np.float32)}, backend, invokes=2,
                      activations_fp16=half)
    np.testing.assert_array_equal(got["y"], w16.astype(np.float32))  # fp16 values: exact in either storage
    assert stats[-1]["partitions"] == 1 and stats[-1]["declined_nodes"] == 0
    assert stats[-1]["device_weight_bytes"] == 64 * 96 * (2 if half else 4)  # the validation build uploads nothing


@pytest.mark.parametrize("shape", [(3,), (5, 7), (64, 96)])
@pytest.mark.parametrize("backend", ["opencl", "gl"])
def test_fp16_input_dequantize_with_half_activation_storage(rng, backend: str, shape) -> None:
    """activations_fp16: DEQUANTIZE of an fp16 graph input (dequant_f16) writes half activation storage; odd
    element counts put neighbouring halves in one 32-bit word on GL (scalar half stores)."""
    x = (rng.standard_normal(shape) * 100.0).astype(np.float16)
    g = OpGraphBuilder()
    xi = g.input("x", list(shape), np.float16)
    y = g.tensor("y", list(shape))
    g.builtin(S.BuiltinOperator.DEQUANTIZE, S.BuiltinOptions.NONE, None, [xi], [y])
    g.output(y)
    got, stats = _run(g.build(), {"x": x}, backend, activations_fp16=True)
    np.testing.assert_array_equal(got["y"], x.astype(np.float32))
    assert stats[-1]["partitions"] == 1 and stats[-1]["declined_nodes"] == 0


def test_setup_time_is_reported_and_spent_at_the_first_invoke_only(rng) -> None:
    """stats setup_*_us: weight packing, uploads, program builds and GEMM tuning happen once; a second invoke adds
    nothing. On OpenCL the FC's packing transpose runs on the device (the weights go up as stored): no host time."""
    w = rng.standard_normal((512, 1024)).astype(np.float32)
    model = fully_connected_model([1, 64, 1024], w, None)
    _, stats = _run(model, {"x": rng.standard_normal((1, 64, 1024)).astype(np.float32)}, "opencl", invokes=2)
    keys = ("setup_weights_host_us", "setup_weights_upload_us", "setup_tuning_us", "setup_programs_us",
            "weights_on_device", "weights_on_host")
    first, second = ({k: s[k] for k in keys} for s in stats)
    assert first == second
    assert first["weights_on_device"] == 1 and first["weights_on_host"] == 0
    assert first["setup_weights_host_us"] == 0 and first["setup_weights_upload_us"] > 0
    assert first["setup_programs_us"] > 0 and first["setup_tuning_us"] >= 0


def test_cpu_backend_reports_no_setup_time() -> None:
    assert not any(k.startswith("setup_") for k in native.stats(native.load(backend="cpu")))


@pytest.mark.parametrize("backend", ["opencl", "gl"])
def test_folded_host_values_are_released_after_the_first_invoke(tmp_path: Path, rng, backend: str) -> None:
    """The float32 host values of folded DEQUANTIZEs (stats host_weight_bytes) live until the first invoke has
    packed / uploaded what the ops derive from them (an FC's packed weights, a Winograd conv's U), then they are
    freed; later invokes still compute the same result from the device copies."""
    g = OpGraphBuilder()
    x = g.input("x", [1, 16, 16, 8])
    w = (rng.standard_normal((16, 3, 3, 8)) * 0.2).astype(np.float32)
    c = g.tensor("c", [1, 16, 16, 16])
    g.custom("SdConv2DWinograd", [x, g.const("w", w), g.const("b", np.zeros(16, np.float32))], [c], _opts(4))
    r = _reshape(g, c, [1, 256, 16], "r")
    wf = (rng.standard_normal((300, 16)) * 0.1).astype(np.float32)
    g.output(_fc(g, r, wf, None, [1, 256, 300], "y"))
    model = _quantized(tmp_path, g.build(), "fp16")
    inputs = {"x": rng.standard_normal((1, 16, 16, 8)).astype(np.float32)}
    want, _ = _run(model, inputs, "cpu")
    delegate = native.load(backend=backend)
    it = Interpreter(model_content=model, experimental_delegates=[delegate])
    it.allocate_tensors()
    held = native.stats(delegate)["host_weight_bytes"]
    assert held == (16 * 3 * 3 * 8 + 300 * 16) * 4  # both weight tensors, as float32
    it.set_tensor(it.get_input_details()[0]["index"], inputs["x"])
    outs = []
    for _ in range(2):
        it.invoke()
        outs.append(it.get_tensor(it.get_output_details()[0]["index"]).copy())
        assert native.stats(delegate)["host_weight_bytes"] == 0
    np.testing.assert_array_equal(outs[0], outs[1])
    assert _rel(outs[1], want["y"]) < 1e-4
