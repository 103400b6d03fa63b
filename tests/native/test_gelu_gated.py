"""Gated SdGelu (GEGLU: y = x[..., :F] * gelu(x[..., F:])) on every backend vs the numpy reference
(sdconvert.ops.gelu), plus its shape rule, its options parser and what a delegate without ``gated`` would do.

The backends run the same cases: the CPU kernel (every instruction set), the OpenCL kernels (PoCL in CI) and
their GLSL port (llvmpipe). F % 4 == 0 shapes take the float4 kernels on the GPU backends, odd F the scalar
ones; the CPU cases include rows that straddle the 32K-element task chunks.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pytest

from cpu_isa import ENV as ISA_ENV
from cpu_isa import available_isas
from harness import HALF_STORAGE_RTOL, assert_close, make_interpreter, relative_error, run
from sdconvert.ops import OpAttrError
from sdconvert.ops import gelu as G
from sdlite import native
from tflite_models import GraphBuilder, flex

BACKENDS = ("cpu", "opencl", "gl")
MODES = ("none", "tanh", "quick")
# input shapes [..., 2F]: F = 12, 1280 (SD1.5's first level), 8 (F4 = 2: narrow float4 rows) use the float4
# GPU kernels; F = 5, 1, 333 the scalar ones.
SHAPES = [(2, 7, 24), (1, 64, 2560), (3, 16), (3, 10), (4, 2), (2, 5, 666)]


def gated_model(in_shape: Sequence[int], options: bytes | None, out_shape: Sequence[int] | None = None) -> bytes:
    """x [..., 2F] -> SdGelu -> y [..., F] (``out_shape`` overrides y's declared shape)."""
    g = GraphBuilder()
    x = g.input("x", in_shape)
    y = g.tensor("y", out_shape if out_shape is not None else [*in_shape[:-1], in_shape[-1] // 2])
    g.custom("SdGelu", [x], [y], options)
    g.output(y)
    return g.build()


def _attrs(mode: str) -> G.GeluAttrs:
    return G.GeluAttrs(approximate=mode, gated=True)


def test_reference_matches_diffusers_geglu_and_torch_gelu(rng):
    """The numpy reference is diffusers' GEGLU: chunk(2, -1) into (hidden, gate), hidden * F.gelu(gate)."""
    import torch

    x = (3.0 * rng.standard_normal((2, 9, 14))).astype(np.float32)
    hidden, gate = torch.from_numpy(x).double().chunk(2, dim=-1)
    for mode, approximate in (("none", "none"), ("tanh", "tanh")):
        want = (hidden * torch.nn.functional.gelu(gate, approximate=approximate)).numpy()
        np.testing.assert_allclose(G.reference([x], _attrs(mode)), want, rtol=1e-6, atol=1e-6)
    quick = (hidden * gate * torch.sigmoid(1.702 * gate)).numpy()
    np.testing.assert_allclose(G.reference([x], _attrs("quick")), quick, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"even last dimension, got shape \(2, 3\)"):
        G.reference([np.zeros((2, 3), np.float32)], _attrs("none"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_reference(rng, backend, mode, shape):
    x = (3.0 * rng.standard_normal(shape)).astype(np.float32)
    result = run(gated_model(shape, G.SPEC.encode(_attrs(mode))), {"x": x}, backend=backend)
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    assert_close(result.outputs["y"], G.reference([x], _attrs(mode)), rtol=1e-5)


@pytest.mark.parametrize("backend", ["opencl", "gl"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
def test_half_activation_storage_matches_reference(rng, backend, mode, shape):
    """activations_fp16: x and y stored as half (the float4 kernel for F % 4 == 0, else the scalar one), on the GPU."""
    x = (3.0 * rng.standard_normal(shape)).astype(np.float32)
    result = run(gated_model(shape, G.SPEC.encode(_attrs(mode))), {"x": x}, backend=backend, activations_fp16=True)
    assert result.stats["partitions"] == 1 and result.stats["claimed_nodes"] == 1
    assert result.stats["declined_nodes"] == 0
    assert relative_error(result.outputs["y"], G.reference([x], _attrs(mode))) <= HALF_STORAGE_RTOL


@pytest.mark.parametrize("backend", BACKENDS)
def test_value_and_gate_halves_are_not_swapped(backend):
    # value 2, gate 1 -> 2 * gelu(1) = 1.6826894; swapped halves would give 1 * gelu(2) = 1.9544997.
    x = np.array([[2.0, 2.0, 1.0, 1.0]], np.float32)
    y = run(gated_model(x.shape, G.SPEC.encode(_attrs("none"))), {"x": x}, backend=backend).outputs["y"]
    np.testing.assert_allclose(y, [[1.6826894, 1.6826894]], rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
def test_extreme_gates_stay_finite_and_relatively_exact(backend, mode):
    gate = np.array([0.0, -0.0, 1e-30, -1e-3, 1e-3, -5.0, 5.0, -9.0, 30.0, -30.0, 1e4, -1e4], np.float32)
    x = np.concatenate([np.full_like(gate, 1.5), gate])[None, :]
    y = run(gated_model(x.shape, G.SPEC.encode(_attrs(mode))), {"x": x}, backend=backend).outputs["y"]
    assert np.isfinite(y).all()
    want = G.reference([x], _attrs(mode))
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=1e-37)  # elementwise relative: tails included


@pytest.mark.parametrize("isa", available_isas())
@pytest.mark.parametrize("mode", MODES)
def test_every_cpu_instruction_set(monkeypatch, rng, isa, mode):
    # 3 rows x F = 40000 and 7 x 9999: 32K-element tasks start and end mid-row, odd F leaves a masked tail per row.
    monkeypatch.setenv(ISA_ENV, isa)
    for shape in ((3, 80000), (7, 19998)):
        x = (3.0 * rng.standard_normal(shape)).astype(np.float32)
        y = run(gated_model(shape, G.SPEC.encode(_attrs(mode))), {"x": x}, num_threads=4).outputs["y"]
        assert_close(y, G.reference([x], _attrs(mode)))


def test_gl_picks_the_vec4_kernel_only_when_f_is_a_multiple_of_4(rng, tmp_path):
    """The host side (ops/gelu/gpu.cc) is shared by OpenCL and GL; GL's program dump (gl_dump_dir) shows which kernel
    ran and with which 2-D work-group (width = next power of two >= the columns, capped at 64 invocations)."""
    for shape in ((2, 24), (2, 10), (2, 2 * 4 * 100)):
        x = rng.standard_normal(shape).astype(np.float32)
        run(gated_model(shape, G.SPEC.encode(_attrs("tanh"))), {"x": x}, backend="gl", gl_dump_dir=str(tmp_path))
    dumped = sorted(p.name for p in tmp_path.glob("gelu_gated_*.comp"))
    assert dumped == ["gelu_gated_f32_8x8x1.comp", "gelu_gated_f32_v4_4x16x1.comp", "gelu_gated_f32_v4_64x1x1.comp"]


def _declined_reason(model: bytes, backend: str = "cpu") -> str:
    """Exactly one declined node, and the runtime's unresolved-op failure (nothing else can run SdGelu)."""
    delegate = native.load(backend=backend, num_threads=1, log_level="silent")
    interpreter = make_interpreter(model, delegate)
    with pytest.raises(RuntimeError, match="unresolved custom op: SdGelu"):
        interpreter.allocate_tensors()
    stats = native.stats(delegate)
    assert stats["claimed_nodes"] == 0 and stats["declined_nodes"] == 1, stats
    return stats["declined"][0]["reason"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_odd_last_dim_is_declined_with_reason(backend):
    model = gated_model((2, 5), G.SPEC.encode(_attrs("none")), out_shape=(2, 2))
    assert _declined_reason(model, backend) == (
        "SdGelu: gated input needs an even last dimension (value and gate halves), got [2,5]")


def test_scalar_input_is_declined_with_reason():
    model = gated_model((), G.SPEC.encode(_attrs("none")), out_shape=())
    assert _declined_reason(model) == "SdGelu: gated input needs an even last dimension (value and gate halves), got []"


def test_gated_output_shape_must_be_half():
    model = gated_model((2, 6), G.SPEC.encode(_attrs("none")), out_shape=(2, 6))
    assert _declined_reason(model) == "SdGelu: output shape [2,6] does not match the inferred [2,3]"


def test_a_delegate_without_gated_declines_instead_of_computing_plain_gelu():
    """What a delegate that predates ``gated`` sees: it ignores the unknown key (as the options contract says), so
    it parses the node as plain GELU -- whose shape rule (y = x's shape) cannot match a gated node's [..., F]
    output. Simulated with the same node without the key; the version stays 1 (opcode versions of custom ops are
    not visible through the C ABI: delegate/partitioner.cc)."""
    model = gated_model((2, 6), G.SPEC.encode(G.GeluAttrs(approximate="none", gated=False)))
    assert _declined_reason(model) == "SdGelu: output shape [2,3] does not match the inferred [2,6]"


@pytest.mark.parametrize("options", [
    {"gated": True},
    {"gated": False, "approximate": "quick"},
    {"gated": 1},                                 # bool from int 0/1
    {"gated": 0},
    {"gated": 2},
    {"gated": "yes"},
    {"gated": None},
    {"gated": 1.0},
])
def test_native_parser_accepts_exactly_what_python_decode_accepts(options):
    blob = flex(options)
    try:
        attrs = G.SPEC.decode(blob)
        python_ok = True
    except OpAttrError:
        python_ok = False
    native_ok, message = native.check_op_options("SdGelu", blob)
    assert native_ok == python_ok, message
    if native_ok:
        assert attrs.gated == bool(options["gated"])
    else:
        assert message.startswith("SdGelu: attribute 'gated'") and "\n" not in message


def test_encode_round_trips():
    for mode in MODES:
        for gated in (False, True):
            a = G.GeluAttrs(approximate=mode, gated=gated)
            assert G.SPEC.decode(G.SPEC.encode(a)) == a
    assert G.SPEC.decode(flex({"approximate": "tanh"})) == G.GeluAttrs("tanh", gated=False)  # pre-gated files
